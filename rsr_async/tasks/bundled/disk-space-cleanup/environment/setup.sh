#!/bin/bash
set -euo pipefail
mkdir -p /srv/data/db /srv/data/media/video /srv/data/tmp/cache/a /srv/data/tmp/uploads /srv/data/logs
head -c 3000000 /dev/zero > /srv/data/media/video/intro.mp4
head -c 2500000 /dev/zero > /srv/data/db/main.sqlite
head -c 900000 /dev/zero > /srv/data/logs/app.log
head -c 2800000 /dev/zero > /srv/data/tmp/cache/a/blob.bin
head -c 600000 /dev/zero > /srv/data/tmp/uploads/partial-1.upload
head -c 400000 /dev/zero > /srv/data/tmp/uploads/partial-2.upload
head -c 100 /dev/zero > /srv/data/tmp/uploads/fresh.upload
head -c 1000 /dev/zero > /srv/data/tmp/cache/a/recent.bin
head -c 1200000 /dev/zero > /srv/data/media/old-archive.tar
touch -d '30 days ago' /srv/data/tmp/cache/a/blob.bin /srv/data/tmp/uploads/partial-1.upload /srv/data/media/old-archive.tar /srv/data/logs/app.log
touch -d '9 days ago' /srv/data/tmp/uploads/partial-2.upload
touch -d '2 days ago' /srv/data/tmp/cache/a/recent.bin
