#!/bin/bash
# terminal-bench runs this as `bash /tests/run-tests.sh` with TEST_DIR=/tests.
cd /app
python3 -m pytest -p no:cacheprovider -rA "$TEST_DIR/test_inventory_total.py"
