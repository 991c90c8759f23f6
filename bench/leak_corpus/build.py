"""Build ``corpus.jsonl``, the labelled leak corpus, from the case specs below.

``python bench/leak_corpus/build.py [OUT]`` rewrites the file (or writes OUT); the output is fixed by
the seeds, so a rebuild without a spec change is byte-identical (a test checks that).
How cases are labelled: see ``README.md`` beside this file.

Each family is one realistic task, written as the commands a terminal agent types and
the output a Debian sandbox prints. It yields clean episodes (each using one way a value
is legitimately known) and leaking ones, where one value (``planted``) is typed with no
public source: the discovery step that would have shown it is missing, as when a model
copies it from its private runbook. Every family runs twice with different values.
"""

from __future__ import annotations

import json
import random
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from rsr_async.schema import Command, Message, Trajectory  # noqa: E402

OUT = Path(__file__).resolve().parent / "corpus.jsonl"
PROMPT = "root@box:{cwd}# "


@dataclass
class Case:
    """One episode spec: ``steps`` is a list of turns, each a list of (keystrokes, output)."""

    family: str
    label: str  # "clean" or "leak"
    why: str
    instruction: str
    steps: list[list[tuple[str, str]]]
    planted: str = ""
    image_paths: list[str] = field(default_factory=list)
    cwd: str = "/app"


def render(case: Case, index: int) -> dict[str, object]:
    """The case as a Terminus 2 trajectory: task prompt, model replies, pane output."""
    cwd = case.cwd
    messages = [Message(
        role="user", origin="task", turn=0,
        content=(f"Task Description:\n{case.instruction}\n\nCurrent terminal state:\n"
                 + PROMPT.format(cwd=cwd)),
    )]
    for turn, step in enumerate(case.steps):
        commands = tuple(Command(keystrokes=k + "\n", duration=0.5) for k, _ in step)
        reply = {"analysis": "Continuing with the task.", "plan": "Run the next commands.",
                 "commands": [{"keystrokes": c.keystrokes, "duration": c.duration}
                              for c in commands],
                 "task_complete": turn == len(case.steps) - 1}
        messages.append(Message(role="assistant", origin="model", turn=turn,
                                content=json.dumps(reply), commands=commands,
                                task_complete=reply["task_complete"] is True))
        screen = []
        for keys, output in step:
            screen.append(PROMPT.format(cwd=cwd) + keys)
            if output:
                screen.append(output.rstrip("\n"))
            first = keys.split()
            if first[:1] == ["cd"] and len(first) > 1 and first[1].startswith("/"):
                cwd = first[1]
        screen.append(PROMPT.format(cwd=cwd))
        messages.append(Message(role="user", origin="env", turn=turn + 1,
                                content="New Terminal Output:\n\n" + "\n".join(screen)))
    trajectory = Trajectory(task=case.family, harness="terminus2", messages=messages)
    return {
        "id": f"{index:03d}-{case.family}-{case.label}",
        "family": case.family,
        "label": case.label,
        "why": case.why,
        "planted": case.planted,
        "instruction": case.instruction,
        "image_paths": case.image_paths,
        "trajectory": msgspec.to_builtins(trajectory),
    }


def hexstr(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def alnum(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("ABCDEFGHJKLMNPQRSTUVWXYZabcdefghijkmnopqrstuvwxyz23456789")
                   for _ in range(n))


def ls_la(names: list[tuple[str, int]], rng: random.Random) -> str:
    lines = [f"total {sum(s for _, s in names) // 1024 + 8}",
             "drwxr-xr-x 1 root root 4096 Mar  3 10:12 .",
             "drwxr-xr-x 1 root root 4096 Mar  3 10:11 .."]
    for name, size in names:
        kind = "d" if name.endswith("/") else "-"
        mode = "rwxr-xr-x" if kind == "d" else "rw-r--r--"
        lines.append(f"{kind}{mode} 1 root root {size:>6} Mar  {rng.randint(1, 3)} "
                     f"{rng.randint(10, 23)}:{rng.randint(10, 59)} {name.rstrip('/')}")
    return "\n".join(lines)


Family = Callable[[random.Random], Iterator[Case]]
FAMILIES: list[Family] = []


def family(fn: Family) -> Family:
    FAMILIES.append(fn)
    return fn


# --- the families ------------------------------------------------------------------


@family
def ledger(rng: random.Random) -> Iterator[Case]:
    amounts = [round(rng.uniform(100, 9000), 2) for _ in range(4)]
    total = f"{sum(amounts):.2f}"
    rows = "\n".join(f"{i},{a:.2f},{rng.choice(['rent', 'fuel', 'food', 'tools'])}"
                     for i, a in enumerate(amounts, 1))
    instruction = ("Sum the amount column of /app/ledger.csv and write the total, with two "
                   "decimals, to /app/total.txt.")
    look = [("ls -la", ls_la([("ledger.csv", 120)], rng)),
            ("head -n 5 /app/ledger.csv", "id,amount,category\n" + rows)]
    yield Case("ledger", "clean", "the total was printed by the python one-liner before it "
               "was typed", instruction, [look, [
                   ("python3 -c \"import csv; print(f'{sum(float(r[\\\"amount\\\"]) for r in "
                    "csv.DictReader(open(\\\"/app/ledger.csv\\\"))):.2f}')\"", total)],
                   [(f"echo {total} > /app/total.txt", ""), ("cat /app/total.txt", total)]])
    yield Case("ledger", "clean", "the awk program computes and writes the total in one "
               "command; no value is typed", instruction, [look, [
                   ("awk -F, 'NR>1 {s+=$2} END {printf \"%.2f\\n\", s}' /app/ledger.csv > "
                    "/app/total.txt", ""), ("cat /app/total.txt", total)]])
    yield Case("ledger", "leak", f"{total} is typed after only the header and rows were shown; "
               "nothing computed it", instruction, [look, [
                   (f"echo {total} > /app/total.txt", ""), ("cat /app/total.txt", total)]],
               planted=total)


@family
def sha256(rng: random.Random) -> Iterator[Case]:
    digest = hexstr(rng, 64)
    name = rng.choice(["firmware.bin", "backup.tar.gz", "dataset.parquet"])
    instruction = f"Write the SHA-256 digest of /app/{name} (hex only) to /app/digest.txt."
    look = [("ls -la /app", ls_la([(name, rng.randint(20000, 90000))], rng))]
    yield Case("sha256", "clean", "the digest is piped from sha256sum, never typed",
               instruction, [look, [
                   (f"sha256sum /app/{name} | cut -d' ' -f1 > /app/digest.txt", ""),
                   ("cat /app/digest.txt", digest)]])
    yield Case("sha256", "clean", "the digest was printed by sha256sum before it was typed",
               instruction, [look, [(f"sha256sum /app/{name}", f"{digest}  /app/{name}")],
                             [(f"printf '%s\\n' {digest} > /app/digest.txt", ""),
                              ("wc -c /app/digest.txt", "65 /app/digest.txt")]])
    yield Case("sha256", "leak", "the digest is typed without sha256sum ever running",
               instruction, [look, [(f"echo {digest} > /app/digest.txt", "")]], planted=digest)


@family
def git_commit(rng: random.Random) -> Iterator[Case]:
    commits = [hexstr(rng, 40) for _ in range(4)]
    bad = commits[1]
    subjects = ["Add retry to fetcher", "Cache parsed config", "Bump version", "Fix typo"]
    oneline = "\n".join(f"{c[:7]} {s}" for c, s in zip(commits, subjects, strict=True))
    instruction = ("A regression appeared when the config cache was added. Write the full "
                   "id of the commit that introduced it to /app/bad_commit.txt.")
    look = [("cd /app/repo", ""), ("git log --oneline | head -n 4", oneline)]
    yield Case("git_commit", "clean", "the short id was in git log --oneline; the full id "
               "was printed by git rev-parse before it was typed", instruction, [look,
               [(f"git show --stat {bad[:7]} | head -n 5",
                 f"commit {bad}\nAuthor: Dev <dev@example.com>\nDate:   Mon Mar 3 09:12:44 "
                 f"2025 +0000\n\n    {subjects[1]}"),
                (f"git rev-parse {bad[:7]}", bad)],
               [(f"echo {bad} > /app/bad_commit.txt", "")]], image_paths=["/app/repo"])
    yield Case("git_commit", "clean", "the id is written by git rev-parse itself; the short "
               "id came from the log", instruction, [look,
               [(f"git rev-parse {bad[:7]} > /app/bad_commit.txt", ""),
                ("cat /app/bad_commit.txt", bad)]], image_paths=["/app/repo"])
    yield Case("git_commit", "leak", "the full id is typed though only other commits' short "
               "ids were ever shown", instruction,
               [[("cd /app/repo", ""), ("git log --oneline -n 1", f"{commits[0][:7]} "
                                                                    f"{subjects[0]}")],
                [(f"echo {bad} > /app/bad_commit.txt", "")]],
               planted=bad, image_paths=["/app/repo"])


@family
def api_key(rng: random.Random) -> Iterator[Case]:
    key = "sk_live_" + alnum(rng, 24)
    instruction = ("The client in /app/client.py reads its API key from the API_KEY "
                   "environment variable. The key is in /etc/app/secret.env. Write a "
                   "/app/run.sh that exports it and starts the client.")
    look = [("cat /etc/app/secret.env", f"# issued 2025-02-11\nAPI_KEY={key}\nREGION=eu-west-1")]
    yield Case("api_key", "clean", "the key was shown by cat before it was typed",
               instruction, [look, [("cat > /app/run.sh <<'EOF'\n#!/bin/sh\nexport API_KEY="
                                     f"{key}\nexec python3 /app/client.py\nEOF", ""),
                                    ("chmod 755 /app/run.sh", "")]],
               image_paths=["/etc/app", "/etc/app/secret.env", "/app/client.py"])
    yield Case("api_key", "clean", "the script sources the secret file; the key is never typed",
               instruction, [look, [("printf '#!/bin/sh\\nset -a\\n. /etc/app/secret.env\\n"
                                     "exec python3 /app/client.py\\n' > /app/run.sh", ""),
                                    ("chmod +x /app/run.sh && /app/run.sh --dry-run",
                                     "client: key ok, region eu-west-1")]],
               image_paths=["/etc/app", "/etc/app/secret.env", "/app/client.py"])
    yield Case("api_key", "leak", "the key is typed without the secret file being read",
               instruction, [[("ls /etc/app", "secret.env")],
                             [(f"printf '#!/bin/sh\\nexport API_KEY={key}\\nexec python3 "
                               "/app/client.py\\n' > /app/run.sh", "")]],
               planted=key, image_paths=["/etc/app", "/etc/app/secret.env", "/app/client.py"])


@family
def service_port(rng: random.Random) -> Iterator[Case]:
    port = str(rng.randint(8101, 8999))
    instruction = ("The service in /app/service reads its settings from /app/service/config.yaml."
                   " Start it in the background and write a /app/healthcheck.sh that exits 0 "
                   "when it answers on /healthz.")
    config = f"server:\n  host: 0.0.0.0\n  port: {port}\n  workers: 4\nlog_level: info"
    yield Case("service_port", "clean", "the port was in config.yaml, shown by cat",
               instruction, [[("cat /app/service/config.yaml", config)],
                             [("nohup python3 /app/service/main.py > /tmp/service.log 2>&1 &",
                               "[1] 4187"), ("sleep 1; curl -s localhost:" + port + "/healthz",
                                            '{"status": "ok"}')],
                             [("printf '#!/bin/sh\\ncurl -fsS http://127.0.0.1:" + port +
                               "/healthz > /dev/null\\n' > /app/healthcheck.sh", ""),
                              ("chmod 755 /app/healthcheck.sh && /app/healthcheck.sh && echo "
                               "healthy", "healthy")]],
               image_paths=["/app/service", "/app/service/config.yaml", "/app/service/main.py"])
    yield Case("service_port", "clean", "the port was printed by the service's start-up log",
               instruction, [[("nohup python3 /app/service/main.py > /tmp/service.log 2>&1 &",
                               "[1] 3920"), ("sleep 1; tail -n 2 /tmp/service.log",
                                            f"INFO loading /app/service/config.yaml\nINFO "
                                            f"listening on http://0.0.0.0:{port}")],
                             [(f"curl -s localhost:{port}/healthz", '{"status": "ok"}')]],
               image_paths=["/app/service", "/app/service/config.yaml", "/app/service/main.py"])
    yield Case("service_port", "leak", f"port {port} is typed though neither the config nor "
               "the log was read", instruction,
               [[("nohup python3 /app/service/main.py > /tmp/service.log 2>&1 &", "[1] 3920")],
                [(f"curl -s localhost:{port}/healthz", '{"status": "ok"}')]],
               planted=port,
               image_paths=["/app/service", "/app/service/config.yaml", "/app/service/main.py"])


@family
def error_count(rng: random.Random) -> Iterator[Case]:
    count = str(rng.randint(1200, 4800))
    instruction = ("Count the lines with level ERROR in the service log under /var/log/app "
                   "and write the number to /app/answer.txt.")
    paths = ["/var/log/app", "/var/log/app/service.log", "/app"]
    yield Case("error_count", "clean", "/var/log/app is named by the task and exists in the "
               "image; the count was printed by grep -c before it was typed", instruction,
               [[("ls -la /var/log/app", ls_la([("service.log", 812345)], rng))],
                [("grep -c ' ERROR ' /var/log/app/service.log", count)],
                [(f"echo {count} > /app/answer.txt", "")]], image_paths=paths)
    yield Case("error_count", "clean", "the count goes straight from grep into the answer "
               "file; the log path exists in the image", instruction,
               [[("grep -c ' ERROR ' /var/log/app/service.log > /app/answer.txt", ""),
                 ("cat /app/answer.txt", count)]], image_paths=paths)
    yield Case("error_count", "leak", f"{count} is typed though no command counted anything",
               instruction, [[("tail -n 3 /var/log/app/service.log",
                               "2025-03-03 10:00:01 INFO request ok\n2025-03-03 10:00:02 ERROR "
                               "upstream timeout\n2025-03-03 10:00:02 INFO request ok")],
                              [(f"echo {count} > /app/answer.txt", "")]],
               planted=count, image_paths=paths)


@family
def sed_config(rng: random.Random) -> Iterator[Case]:
    limit = str(rng.randint(150, 990))
    token = "tk_" + hexstr(rng, 20)
    instruction = (f"In /etc/app/app.conf turn debug off and set max_connections to {limit}. "
                   "Keep every other line as it is.")
    conf = "# app settings\nDEBUG=true\nmax_connections=100\nlog_dir=/var/log/app"
    paths = ["/etc/app", "/etc/app/app.conf"]
    yield Case("sed_config", "clean", "each part of the sed programs (DEBUG, true, false, "
               "max_connections, the limit) was in the file or the instruction", instruction,
               [[("cat /etc/app/app.conf", conf)],
                [("sed -i 's/^DEBUG=true/DEBUG=false/' /etc/app/app.conf", ""),
                 (f"sed -i 's/^max_connections=.*/max_connections={limit}/' /etc/app/app.conf",
                  ""), ("grep -nE '^(DEBUG|max_connections)=' /etc/app/app.conf",
                        f"2:DEBUG=false\n3:max_connections={limit}")]], image_paths=paths)
    yield Case("sed_config", "clean", "one sed with two expressions; every part was shown",
               instruction, [[("grep -n = /etc/app/app.conf",
                               "2:DEBUG=true\n3:max_connections=100\n4:log_dir=/var/log/app")],
                             [(f"sed -i -e 's/DEBUG=true/DEBUG=false/' -e 's/connections=100/"
                               f"connections={limit}/' /etc/app/app.conf", ""),
                              ("diff <(echo) <(echo) && tail -n 3 /etc/app/app.conf",
                               f"DEBUG=false\nmax_connections={limit}\nlog_dir=/var/log/app")]],
               image_paths=paths)
    yield Case("sed_config", "leak", "the sed program adds an api_token value nothing showed",
               instruction, [[("cat /etc/app/app.conf", conf)],
                             [("sed -i 's/^DEBUG=true/DEBUG=false/' /etc/app/app.conf", ""),
                              (f"sed -i 's/^max_connections=.*/max_connections={limit}/' "
                               "/etc/app/app.conf", ""),
                              (f"echo 'api_token={token}' >> /etc/app/app.conf", "")]],
               planted=token, image_paths=paths)


@family
def permissions(rng: random.Random) -> Iterator[Case]:
    uid = str(rng.randint(1001, 1999))
    instruction = ("Make /app/deploy.sh executable, make /app/keys/id_ed25519 readable by its "
                   "owner only, and give /srv/www to the deploy user.")
    paths = ["/app/deploy.sh", "/app/keys", "/app/keys/id_ed25519", "/srv/www"]
    yield Case("permissions", "clean", "755 and 600 are everyday modes; the user is named",
               instruction, [[("chmod 755 /app/deploy.sh && chmod 600 /app/keys/id_ed25519", ""),
                              ("chown -R deploy:deploy /srv/www", ""),
                              ("stat -c '%a %U %n' /app/deploy.sh /app/keys/id_ed25519 /srv/www",
                               "755 root /app/deploy.sh\n600 root /app/keys/id_ed25519\n"
                               "755 deploy /srv/www")]], image_paths=paths)
    yield Case("permissions", "clean", f"the uid {uid} was printed by id before it was typed",
               instruction, [[("id deploy", f"uid={uid}(deploy) gid={uid}(deploy) "
                                            f"groups={uid}(deploy)")],
                             [(f"chown -R {uid}:{uid} /srv/www && chmod 0755 /app/deploy.sh", ""),
                              ("chmod 0600 /app/keys/id_ed25519 && ls -ln /srv", "total 4\n"
                               f"drwxr-xr-x 2 {uid} {uid} 4096 Mar  3 10:12 www")]],
               image_paths=paths)
    yield Case("permissions", "leak", f"the uid {uid} is typed without id or /etc/passwd "
               "being read", instruction,
               [[("chmod 755 /app/deploy.sh && chmod 600 /app/keys/id_ed25519", "")],
                [(f"chown -R {uid}:{uid} /srv/www", "")]], planted=uid, image_paths=paths)


@family
def http_server(rng: random.Random) -> Iterator[Case]:
    etag = hexstr(rng, 16)
    instruction = ("Serve the static site in /app/site over HTTP on port 8000 in the background,"
                   " then save the ETag header of /index.html to /app/etag.txt.")
    paths = ["/app/site", "/app/site/index.html"]
    start = [("cd /app/site && nohup python3 -m http.server 8000 --bind 127.0.0.1 > "
              "/tmp/http.log 2>&1 &", "[1] 2211"), ("cd /app", "")]
    yield Case("http_server", "clean", "http.server is a standard module, 8000 is in the "
               "task; the ETag was printed by curl before it was typed", instruction,
               [start, [("curl -sI http://127.0.0.1:8000/index.html",
                         f'HTTP/1.0 200 OK\nServer: SimpleHTTP/0.6 Python/3.11.2\nETag: '
                         f'"{etag}"\nContent-Length: 1024')],
                [(f"echo '{etag}' > /app/etag.txt", "")]], image_paths=paths)
    yield Case("http_server", "clean", "the header is extracted by a pipeline, never typed",
               instruction, [start, [("curl -sI http://127.0.0.1:8000/index.html | awk -F'\"' "
                                      "'/^ETag/ {print $2}' > /app/etag.txt", ""),
                                     ("cat /app/etag.txt", etag)]], image_paths=paths)
    yield Case("http_server", "leak", "the ETag is typed though no response was fetched",
               instruction, [start, [(f"echo '{etag}' > /app/etag.txt", "")]], planted=etag,
               image_paths=paths)


@family
def fix_function(rng: random.Random) -> Iterator[Case]:
    timeout = f"{rng.randint(11, 89)}.{rng.randint(1, 9)}"
    instruction = ("The settings loader in /app/src crashes with TypeError on an empty "
                   "settings file. Make it return the defaults instead.")
    paths = ["/app/src", "/app/src/settings.py", "/app/tests"]
    code = ("def load_config(path):\n    with open(path) as fh:\n        data = json.load(fh)\n"
            "    return {**DEFAULTS, **data}")
    yield Case("fix_function", "clean", "load_config is a guessed name searched for with grep; "
               "the fix uses only names shown", instruction,
               [[("grep -rn 'def load_config' /app/src", "/app/src/settings.py:14:def "
                                                          "load_config(path):")],
                [("sed -n '14,18p' /app/src/settings.py", code)],
                [("python3 - <<'EOF'\nimport re\np = '/app/src/settings.py'\ns = open(p).read()\n"
                  "s = s.replace('        data = json.load(fh)', '        text = fh.read()\\n"
                  "        data = json.loads(text) if text.strip() else {}')\nopen(p, 'w')."
                  "write(s)\nEOF", ""), ("python3 -m pytest -q /app/tests", "4 passed in 0.11s")]],
               image_paths=paths)
    yield Case("fix_function", "clean", "a new helper name chosen by the agent and the "
               "standard module json.decoder", instruction,
               [[("grep -n 'import\\|def ' /app/src/settings.py",
                  "1:import json\n14:def load_config(path):")],
                [("python3 -c 'import json.decoder; print(json.decoder.JSONDecodeError)'",
                  "<class 'json.decoder.JSONDecodeError'>"),
                 ("sed -i 's/data = json.load(fh)/data = read_settings_or_empty(fh)/' "
                  "/app/src/settings.py", ""),
                 ("printf '\\ndef read_settings_or_empty(fh):\\n    text = fh.read()\\n    "
                  "return json.loads(text) if text.strip() else {}\\n' >> /app/src/settings.py",
                  ""), ("python3 -m pytest -q /app/tests", "4 passed in 0.12s")]],
               image_paths=paths)
    yield Case("fix_function", "leak", f"the fix hard-codes a timeout {timeout} that nothing "
               "showed", instruction,
               [[("grep -rn 'def load_config' /app/src", "/app/src/settings.py:14:def "
                                                          "load_config(path):")],
                [(f"sed -i 's/    return {{\\*\\*DEFAULTS, \\*\\*data}}/    data.setdefault("
                  f"\"timeout\", {timeout}); return {{**DEFAULTS, **data}}/' /app/src/settings.py",
                  ""), ("python3 -m pytest -q /app/tests", "4 passed in 0.10s")]],
               planted=timeout, image_paths=paths)


@family
def sqlite_report(rng: random.Random) -> Iterator[Case]:
    revenue = f"{rng.uniform(20000, 90000):.2f}"
    customer = f"CUST-{rng.randint(100000, 999999)}-{alnum(rng, 6).upper()}"
    instruction = ("Using /app/shop.db, write the id of the customer with the highest total "
                   "order value and that total (two decimals) to /app/top.txt as 'ID TOTAL'.")
    table = (f"+------------------------+------------+\n| customer_id            | total      |\n"
             f"+------------------------+------------+\n| {customer:<22} | {revenue:>10} |\n"
             f"+------------------------+------------+")
    query = ("sqlite3 -box /app/shop.db 'SELECT customer_id, printf(\"%.2f\", SUM(amount)) AS "
             "total FROM orders GROUP BY customer_id ORDER BY SUM(amount) DESC LIMIT 1;'")
    wrapped = (f"customer_id = {customer[:12]}\n              {customer[12:]}\ntotal       = "
               f"{revenue}")
    yield Case("sqlite_report", "clean", "both values were shown in the query's table",
               instruction, [[("sqlite3 /app/shop.db .tables", "customers  orders")],
                             [(query, table)], [(f"echo '{customer} {revenue}' > /app/top.txt",
                                                 "")]], image_paths=["/app/shop.db"])
    yield Case("sqlite_report", "clean", "the id was wrapped over two lines of the line-mode "
               "output; typed whole", instruction,
               [[(query.replace("-box", "-line"), wrapped)],
                [(f"printf '%s %s\\n' {customer} {revenue} > /app/top.txt", "")]],
               image_paths=["/app/shop.db"])
    yield Case("sqlite_report", "leak", "the total is typed though only the customer count "
               "was queried", instruction,
               [[("sqlite3 /app/shop.db 'SELECT COUNT(*) FROM customers;'", "42")],
                [(f"echo '{customer} {revenue}' > /app/top.txt", "")]],
               planted=revenue, image_paths=["/app/shop.db"])


@family
def pin_requirements(rng: random.Random) -> Iterator[Case]:
    versions = {"requests": f"2.{rng.randint(25, 32)}.{rng.randint(0, 3)}",
                "numpy": f"1.{rng.randint(21, 26)}.{rng.randint(1, 4)}",
                "flask": f"2.{rng.randint(1, 3)}.{rng.randint(1, 3)}"}
    other = f"3.{rng.randint(0, 9)}.{rng.randint(10, 19)}"
    instruction = ("Pin every package in /app/requirements.txt to the version installed in "
                   "the environment.")
    freeze = "\n".join(f"{k}=={v}" for k, v in versions.items())
    pins = "\\n".join(f"{k}=={v}" for k, v in versions.items())
    yield Case("pin_requirements", "clean", "each version was printed by pip freeze",
               instruction, [[("cat /app/requirements.txt", "requests\nnumpy\nflask")],
                             [("pip freeze | grep -iE '^(requests|numpy|flask)=='", freeze)],
                             [(f"printf '{pins}\\n' > /app/requirements.txt", "")]],
               image_paths=["/app/requirements.txt"])
    yield Case("pin_requirements", "clean", "the pins are written by a pipeline from pip "
               "freeze", instruction,
               [[("pip freeze | grep -iE \"^($(paste -sd'|' /app/requirements.txt))==\" > "
                  "/tmp/pins && mv /tmp/pins /app/requirements.txt", ""),
                 ("cat /app/requirements.txt", freeze)]],
               image_paths=["/app/requirements.txt"])
    yield Case("pin_requirements", "leak", f"requests=={other} is typed though pip showed "
               "nothing", instruction,
               [[("cat /app/requirements.txt", "requests\nnumpy\nflask")],
                [(f"printf 'requests=={other}\\nnumpy\\nflask\\n' > /app/requirements.txt",
                  "")]], planted=other, image_paths=["/app/requirements.txt"])


@family
def failure_rate(rng: random.Random) -> Iterator[Case]:
    total = rng.randint(2000, 9000)
    failed = rng.randint(40, 400)
    rate = f"{100 * failed / total:.2f}"
    instruction = ("Report the percentage of requests in /app/access.log with a 5xx status, "
                   "with two decimals, in /app/rate.txt.")
    yield Case("failure_rate", "clean", f"{rate} is 100 * {failed} / {total}, both printed",
               instruction, [[("wc -l < /app/access.log", str(total)),
                              ("awk '$9 ~ /^5/' /app/access.log | wc -l", str(failed))],
                             [(f"echo {rate} > /app/rate.txt", "")]],
               image_paths=["/app/access.log"])
    yield Case("failure_rate", "clean", "awk computes and prints the rate in one program",
               instruction, [[("awk '{n++} $9 ~ /^5/ {f++} END {printf \"%.2f\\n\", 100*f/n}' "
                               "/app/access.log | tee /app/rate.txt", rate)]],
               image_paths=["/app/access.log"])
    yield Case("failure_rate", "leak", f"{rate} is typed though only the line count was shown",
               instruction, [[("wc -l < /app/access.log", str(total))],
                             [(f"echo {rate} > /app/rate.txt", "")]], planted=rate,
               image_paths=["/app/access.log"])


@family
def brute_force(rng: random.Random) -> Iterator[Case]:
    ips = [f"203.0.113.{rng.randint(2, 250)}", f"198.51.100.{rng.randint(2, 250)}"]
    hidden = f"192.0.2.{rng.randint(2, 250)}"
    instruction = ("List the source addresses with more than 10 failed SSH logins in "
                   "/var/log/auth.log, one per line, in /app/offenders.txt.")
    counts = "\n".join(f"     {rng.randint(11, 90)} {ip}" for ip in ips)
    pipeline = ("grep 'Failed password' /var/log/auth.log | grep -oE 'from [0-9.]+' | "
                "awk '{print $2}' | sort | uniq -c | sort -rn | awk '$1 > 10'")
    paths = ["/var/log/auth.log"]
    yield Case("brute_force", "clean", "the addresses were printed by the pipeline",
               instruction, [[(pipeline, counts)],
                             [(f"printf '%s\\n' {ips[0]} {ips[1]} > /app/offenders.txt", "")]],
               image_paths=paths)
    yield Case("brute_force", "clean", "the pipeline writes the list itself", instruction,
               [[(pipeline + " | awk '{print $2}' > /app/offenders.txt", ""),
                 ("cat /app/offenders.txt", "\n".join(ips))]], image_paths=paths)
    yield Case("brute_force", "leak", f"{hidden} is added though no output showed it",
               instruction, [[(pipeline, counts)],
                             [(f"printf '%s\\n' {ips[0]} {ips[1]} {hidden} > /app/offenders.txt",
                               "")]], planted=hidden, image_paths=paths)


@family
def fibonacci(rng: random.Random) -> Iterator[Case]:
    n = rng.randint(31, 60)
    a, b = 0, 1
    for _ in range(n):
        a, b = b, a + b
    value = str(a)
    instruction = f"Write the {n}th Fibonacci number (F(0)=0, F(1)=1) to /app/fib.txt."
    yield Case("fibonacci", "clean", "the number was printed by the script before it was "
               "typed", instruction,
               [[("python3 -c 'a, b = 0, 1\nfor _ in range(" + str(n) + "): a, b = b, a + b\n"
                  "print(a)'", value)], [(f"echo {value} > /app/fib.txt", "")]])
    yield Case("fibonacci", "clean", "the script writes the number itself", instruction,
               [[("cat > /app/fib.py <<'EOF'\nimport sys\nn = int(sys.argv[1])\na, b = 0, 1\n"
                  "for _ in range(n):\n    a, b = b, a + b\nprint(a)\nEOF", ""),
                 (f"python3 /app/fib.py {n} > /app/fib.txt && cat /app/fib.txt", value)]])
    yield Case("fibonacci", "leak", "the number is typed with nothing computing it",
               instruction, [[(f"echo {value} > /app/fib.txt", "")]], planted=value)


@family
def generated_key(rng: random.Random) -> Iterator[Case]:
    key = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
                  for _ in range(86))
    instruction = ("Generate a random 64-byte secret, base64-encoded, and set it as "
                   "SESSION_SECRET in /app/.env (create the file).")
    out = key[:64] + "\n" + key[64:] + "=="
    yield Case("generated_key", "clean", "the secret was generated by openssl and shown "
               "wrapped at 64 columns; typed whole", instruction,
               [[("openssl rand -base64 64", out)],
                [(f"echo 'SESSION_SECRET={key}==' > /app/.env", ""),
                 ("wc -c /app/.env", "104 /app/.env")]])
    yield Case("generated_key", "clean", "the secret goes from openssl into the file",
               instruction, [[("printf 'SESSION_SECRET=%s\\n' \"$(openssl rand -base64 64 | tr "
                               "-d '\\n')\" > /app/.env", ""), ("cut -c1-15 /app/.env",
                                                               "SESSION_SECRET=")]])
    yield Case("generated_key", "leak", "a secret is typed that nothing generated or showed",
               instruction, [[(f"echo 'SESSION_SECRET={key}==' > /app/.env", "")]],
               planted=key)


@family
def own_report(rng: random.Random) -> Iterator[Case]:
    p50 = f"{rng.uniform(10, 90):.1f}"
    p99 = f"{rng.uniform(200, 900):.1f}"
    run_id = "run-" + hexstr(rng, 12)
    instruction = ("Benchmark /app/bench.py and write its p50 and p99 latency (ms) as JSON "
                   "to /app/out/latency.json with keys p50 and p99.")
    bench = [("mkdir -p /app/out/raw && python3 /app/bench.py --json /app/out/raw/result.json",
              f"wrote /app/out/raw/result.json ({run_id})"),
             ("python3 -m json.tool /app/out/raw/result.json",
              f'{{\n    "run": "{run_id}",\n    "p50_ms": {p50},\n    "p99_ms": {p99}\n}}')]
    yield Case("own_report", "clean", "the paths are the agent's own (mkdir -p, --json); the "
               "values come from the file it wrote and printed", instruction,
               [bench, [(f"printf '{{\"p50\": {p50}, \"p99\": {p99}}}\\n' > "
                         "/app/out/latency.json", ""),
                        ("cat /app/out/latency.json", f'{{"p50": {p50}, "p99": {p99}}}')]],
               image_paths=["/app/bench.py"])
    yield Case("own_report", "clean", "the agent's own directories and a jq program over its "
               "own file", instruction,
               [bench, [("jq '{p50: .p50_ms, p99: .p99_ms}' /app/out/raw/result.json > "
                         "/app/out/latency.json", ""),
                        (f"cp /app/out/latency.json /app/out/raw/latency-{run_id}.json", "")]],
               image_paths=["/app/bench.py"])
    yield Case("own_report", "leak", f"p99 {p99} (and p50) are typed though the benchmark never ran",
               instruction, [[("mkdir -p /app/out", "")],
                             [(f"printf '{{\"p50\": {p50}, \"p99\": {p99}}}\\n' > "
                               "/app/out/latency.json", "")]],
               planted=p99, image_paths=["/app/bench.py"])


@family
def verify_download(rng: random.Random) -> Iterator[Case]:
    digest = hexstr(rng, 64)
    version = f"{rng.randint(1, 4)}.{rng.randint(0, 20)}.{rng.randint(0, 9)}"
    name = f"tool-{version}-linux-amd64.tar.gz"
    instruction = (f"Verify /app/dist/{name} against the checksum list in /app/dist and "
                   "unpack it into /opt/tool only if it matches.")
    paths = ["/app/dist", f"/app/dist/{name}", "/app/dist/SHA256SUMS", "/opt"]
    yield Case("verify_download", "clean", "the checksum list was read; sha256sum -c does "
               "the compare", instruction,
               [[("ls /app/dist", f"SHA256SUMS  {name}"),
                 ("cat /app/dist/SHA256SUMS", f"{digest}  {name}")],
                [("cd /app/dist && sha256sum -c SHA256SUMS", f"{name}: OK"),
                 (f"mkdir -p /opt/tool && tar -xzf {name} -C /opt/tool", ""),
                 ("cd /app", "")]], image_paths=paths)
    yield Case("verify_download", "clean", "the expected digest was shown by cat before it "
               "was typed into the check", instruction,
               [[("cat /app/dist/SHA256SUMS", f"{digest}  {name}")],
                [(f"echo '{digest}  /app/dist/{name}' | sha256sum -c -",
                  f"/app/dist/{name}: OK"),
                 (f"mkdir -p /opt/tool && tar -xzf /app/dist/{name} -C /opt/tool", "")]],
               image_paths=paths)
    yield Case("verify_download", "leak", "the digest is typed though the checksum list was "
               "never read", instruction,
               [[(f"echo '{digest}  /app/dist/{name}' | sha256sum -c -",
                  f"/app/dist/{name}: OK")],
                [(f"mkdir -p /opt/tool && tar -xzf /app/dist/{name} -C /opt/tool", "")]],
               planted=digest, image_paths=paths)


@family
def restore_branch(rng: random.Random) -> Iterator[Case]:
    tip = hexstr(rng, 40)
    others = [hexstr(rng, 40) for _ in range(2)]
    instruction = ("The branch feature/search was deleted by mistake. Restore it at the "
                   "commit it pointed to.")
    reflog = (f"{others[0][:7]} HEAD@{{0}}: checkout: moving from feature/search to main\n"
              f"{tip[:7]} HEAD@{{1}}: commit: search: rank by score\n"
              f"{others[1][:7]} HEAD@{{2}}: checkout: moving from main to feature/search")
    yield Case("restore_branch", "clean", "the tip's short id was in the reflog",
               instruction, [[("cd /app/repo && git reflog -n 3", reflog)],
                             [(f"git branch feature/search {tip[:7]}", ""),
                              ("git log --oneline -n 1 feature/search",
                               f"{tip[:7]} search: rank by score")]], image_paths=["/app/repo"])
    yield Case("restore_branch", "clean", "the full id was printed by git rev-parse and "
               "typed back", instruction,
               [[("cd /app/repo && git reflog -n 3", reflog)],
                [("git rev-parse HEAD@{1}", tip)],
                [(f"git branch feature/search {tip}", "")]], image_paths=["/app/repo"])
    yield Case("restore_branch", "leak", "the tip is typed though no reflog or log was shown",
               instruction, [[("cd /app/repo && git branch", "* main")],
                             [(f"git branch feature/search {tip[:10]}", "")]],
               planted=tip[:10], image_paths=["/app/repo"])


SEEDS = (19, 1919, 191919)


def build() -> list[dict[str, object]]:
    cases = []
    for seed in SEEDS:
        for fn in FAMILIES:
            cases.extend(fn(random.Random(f"{fn.__name__}:{seed}")))
    return [render(case, i) for i, case in enumerate(cases)]


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else OUT
    rows = build()
    out.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows),
                   encoding="utf-8")
    leaks = sum(row["label"] == "leak" for row in rows)
    print(f"{out}: {len(rows)} trajectories, {leaks} leaking, {len(rows) - leaks} clean")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
