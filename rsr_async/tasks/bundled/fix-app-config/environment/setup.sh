#!/bin/bash
set -euo pipefail
mkdir -p /var/log/app && chmod 755 /var/log/app && cp -r /app /root/.app-orig
