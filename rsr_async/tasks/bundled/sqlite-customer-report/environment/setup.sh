#!/bin/bash
set -euo pipefail
sqlite3 /app/shop.db < /app/seed.sql
rm /app/seed.sql
