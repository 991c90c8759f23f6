#!/bin/bash
# Runs the hidden checks; check.py writes /logs/verifier/reward.txt.
mkdir -p /logs/verifier
cd /app
python3 /tests/check.py
