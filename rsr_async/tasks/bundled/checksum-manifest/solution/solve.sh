#!/bin/bash
set +H
cd /app/data
find . -type f ! -name MANIFEST.sha256 -printf '%P\n' | LC_ALL=C sort | while IFS= read -r f; do sha256sum -- "$f"; done > /tmp/manifest
mv /tmp/manifest MANIFEST.sha256
sha256sum -c MANIFEST.sha256
cd /app
