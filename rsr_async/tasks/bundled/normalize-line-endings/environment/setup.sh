#!/bin/bash
set -euo pipefail
# Written here rather than shipped as files: git would normalise the CRLF endings.
mkdir -p /app/notes/sub
printf 'Standup at 9   \r\nReview PR #12\t \r\n\r\n\r\nLunch with Ana  \r\n\r\n\r\n' > /app/notes/monday.txt
printf 'Deploy v2.3\r\n  indented line stays indented   \r\nCall vendor\r\n' > /app/notes/tuesday.txt
printf 'Write report   \nno CR here\n\n\n' > /app/notes/sub/wednesday.txt
