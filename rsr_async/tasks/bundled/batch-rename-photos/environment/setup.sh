#!/bin/bash
set -euo pipefail
mkdir -p /app/photos
for n in 0007:JPG 0012:jpeg 0100:JPG 0003:Jpg 0045:PNG 0999:jpg; do
  num=${n%%:*}; ext=${n##*:}
  printf 'image %s\n' "$num" > "/app/photos/IMG_${num}.${ext}"
done
echo "keep me" > /app/photos/index.txt
echo "draft" > /app/photos/IMG_notes.txt
