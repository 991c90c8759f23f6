#!/bin/bash
set -euo pipefail
groupadd -f staff2
useradd -m -s /bin/bash -G staff2 alice
mkdir -p /etc/reportd
echo "interval = 60" > /etc/reportd/reportd.conf
chmod 644 /etc/reportd/reportd.conf
