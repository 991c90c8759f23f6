#!/bin/bash
cd /app
jq -r '["id","name","email","city","tags"], (.users | sort_by(.id)[] | [(.id|tostring), .profile.name, (.profile.contact.email // ""), (.address.city // ""), ((.tags // []) | join(";"))]) | @csv' users.json > users.csv
cat users.csv
