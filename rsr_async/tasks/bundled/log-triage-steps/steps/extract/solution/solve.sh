#!/bin/bash
mkdir -p /app/work
awk '$2 == "ERROR"' /app/logs/service.log > /app/work/errors.log
