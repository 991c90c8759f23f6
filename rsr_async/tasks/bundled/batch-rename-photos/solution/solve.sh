#!/bin/bash
cd /app/photos
ls
for f in IMG_[0-9]*.*; do
  num=${f#IMG_}; num=${num%%.*}
  ext=$(echo "${f##*.}" | tr 'A-Z' 'a-z')
  [ "$ext" = jpeg ] && ext=jpg
  mv -- "$f" "$(printf 'photo-%03d.%s' "$((10#$num))" "$ext")"
done
ls
cd /app
