#!/bin/bash
# Runs the hidden checks; check.py writes /logs/verifier/reward.json.
mkdir -p /logs/verifier
cd /app
python3 /tests/check.py
