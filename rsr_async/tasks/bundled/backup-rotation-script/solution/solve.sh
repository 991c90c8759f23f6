#!/bin/bash
set +H
cd /app
cat > rotate.sh <<'EOF'
#!/bin/bash
usage() { echo "usage: rotate.sh DIR KEEP" >&2; exit 2; }
[ $# -eq 2 ] || usage
dir=$1 keep=$2
[[ "$keep" =~ ^[0-9]+$ ]] || usage
[ -d "$dir" ] || usage
n=0
while IFS= read -r -d '' entry; do
  n=$((n + 1))
  name=${entry#* }
  if [ "$n" -gt "$keep" ]; then
    rm -f -- "$name"
    basename -- "$name"
  fi
done < <(find "$dir" -maxdepth 1 -type f -name '*.tar.gz' -printf '%T@ %p\0' | sort -z -rn)
true
EOF
chmod +x rotate.sh
mkdir -p /tmp/t && touch -d '3 days ago' '/tmp/t/a b.tar.gz' && touch /tmp/t/c.tar.gz && ./rotate.sh /tmp/t 1
./rotate.sh; echo "status $?"
rm -rf /tmp/t
