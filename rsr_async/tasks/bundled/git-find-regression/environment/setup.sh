#!/bin/bash
set -euo pipefail
git config --global user.name "Dev Example"
git config --global user.email dev@example.org
git config --global init.defaultBranch main
git config --global advice.detachedHead false

mkdir -p /app/repo && cd /app/repo
git init -q
cat > units.py <<'EOF'
FACTORS = {"mm": 0.001, "cm": 0.01, "m": 1.0, "km": 1000.0}


def to_metres(value, unit):
    return value * FACTORS[unit]
EOF
cat > check.sh <<'EOF'
#!/bin/bash
# Sanity check for the converter; exits non-zero on a wrong answer.
python3 -c '
import units
assert abs(units.to_metres(2.5, "km") - 2500) < 1e-9
assert abs(units.to_metres(30, "cm") - 0.3) < 1e-9
assert abs(units.to_metres(7, "mm") - 0.007) < 1e-9
print("ok")
'
EOF
chmod +x check.sh
git add . && GIT_AUTHOR_DATE="2024-01-01T10:00:00" GIT_COMMITTER_DATE="2024-01-01T10:00:00" git commit -qm "Initial converter and check"
for i in $(seq 1 18); do
  day=$(printf '%02d' $((i + 1)))
  export GIT_AUTHOR_DATE="2024-01-${day}T10:00:00" GIT_COMMITTER_DATE="2024-01-${day}T10:00:00"
  case $i in
    3) echo '# Units are SI unless stated otherwise.' >> units.py; msg="Document units" ;;
    7) sed -i 's/"cm": 0.01/"cm": 0.01, "in": 0.0254/' units.py; msg="Add inches" ;;
    11) sed -i 's/"km": 1000.0/"km": 100.0/' units.py; echo "- tidy factor table" >> CHANGES.md; git add CHANGES.md; msg="Tidy factor table" ;;
    15) sed -i 's/"in": 0.0254/"in": 0.0254, "ft": 0.3048/' units.py; msg="Add feet" ;;
    *) echo "note $i" >> NOTES.md; git add NOTES.md; msg="Update notes ($i)" ;;
  esac
  git add units.py 2>/dev/null || true
  git commit -qam "$msg"
done
git log --format=%H -1 --grep='Tidy factor table' > /dev/null
