#!/bin/bash
set +H
cd /app
./bin/disk-report /app/samples
cat > bin/disk-report <<'EOF'
#!/bin/bash
# Report file sizes in a directory, largest first.
dir=$1
find "$dir" -mindepth 1 -maxdepth 1 -type f -printf '%s\t%f\n' | sort -t "$(printf '\t')" -k1,1rn
find "$dir" -mindepth 1 -maxdepth 1 -type f -printf '%s\n' | awk '{ t += $1 } END { printf "total\t%d\n", t }'
EOF
./bin/disk-report /app/samples
