"""The leak scan's second pass, rule by rule, and its floors on the labelled corpus.

Every test runs against the compiled scanner and its pure twin (the ``leakscan`` fixture).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from rsr_async._native.leakrules import EVERYDAY_NUMBERS, RULES, SandboxKnowledge
from rsr_async.rsr.leakeval import CORPUS, load_corpus, scan_case, scanner_figures

PROMPT = "root@box:/app# "


def flagged(leakscan: ModuleType, actions: list[str], context: list[str], *,
            instruction: str = "", sandbox: SandboxKnowledge | None = None) -> list[str]:
    return [leak.value for leak in leakscan.scan_leaks(actions, context, instruction=instruction,
                                                       sandbox=sandbox)]


def test_sandbox_names_commands_modules_and_image_paths(leakscan: ModuleType) -> None:
    action = ("sha256sum /app/x | tee /dev/stderr; python3 -m http.server 8000 & "
              "/usr/bin/sha256sum /var/log/app/service.log; cat /etc/os-release /proc/cpuinfo")
    # Without the task image, only its own path is unknown: the rest is in every sandbox.
    assert flagged(leakscan, [action], [PROMPT]) == ["/var/log/app/service.log"]
    image = SandboxKnowledge.standard().with_image(paths=["/var/log/app/service.log"])
    assert flagged(leakscan, [action], [PROMPT], sandbox=image) == []
    with pytest.raises(TypeError, match="sandbox must be a SandboxKnowledge"):
        leakscan.LeakScanner("", sandbox={"/app"})
    with pytest.raises(TypeError, match="iterable of str, not one str"):
        SandboxKnowledge(paths="/app")


def test_derive_false_keeps_every_first_pass_literal(leakscan: ModuleType) -> None:
    scanner = leakscan.LeakScanner("", derive=False)
    leaks = scanner.scan("chmod 755 /usr/bin/tool; echo 'ab12cd'")
    assert [(x.value, x.rule) for x in leaks] == [
        ("755", "unseen-number"), ("/usr/bin/tool", "unseen-path"), ("ab12cd", "unseen-quoted")]
    # The second pass clears the everyday mode only.
    derived = leakscan.LeakScanner("").scan("chmod 755 /usr/bin/tool; echo 'ab12cd'")
    assert [(x.value, x.rule) for x in derived] == [
        ("/usr/bin/tool", "unseen-path"), ("ab12cd", "unseen-part")]
    with pytest.raises(TypeError, match="derive must be a bool"):
        leakscan.LeakScanner("", derive="no")


def test_own_paths_are_the_agents_after_it_creates_them(leakscan: ModuleType) -> None:
    actions = ["mkdir -p /srv/out/raw && python3 gen.py > /srv/out/raw/r1_2024.json",
               "cd /srv/out && cp raw/r1_2024.json /srv/final_report_v2.json && cat raw/x.log",
               "ls /srv/secret_dir_77"]
    assert flagged(leakscan, actions, [PROMPT, PROMPT, PROMPT]) == ["/srv/secret_dir_77"]


def test_path_parts_shown_by_a_listing(leakscan: ModuleType) -> None:
    listing = "ls /data/app\nerror.log  access.log\n" + PROMPT
    actions = ["ls /data/app", "grep -c ERROR /data/app/error.log /data/app/debug_2.log"]
    # /data/app was named by the command's echo; error.log by the listing; debug_2.log never.
    assert flagged(leakscan, actions, [PROMPT, listing]) == ["/data/app", "/data/app/debug_2.log"]


def test_wrapped_values_and_abbreviated_ids(leakscan: ModuleType) -> None:
    key = "Zk3L9qWm2Xr7Tn4Bv8Yc1Hd6Jf5Gs0Ea"
    screen = f"| key  | {key[:12]}  |\n|      | {key[12:]} |\n" + PROMPT
    commit = "3f9c2a17be40d6c5a8e1f0b2c3d4e5f60718293a"
    actions = [f"echo {key} > k.txt", f"git show {commit[:10]}", "git show 9d8c7b6a5f"]
    assert flagged(leakscan, actions, [screen, f"commit {commit}\n", ""]) == ["9d8c7b6a5f"]


def test_everyday_constants(leakscan: ModuleType) -> None:
    action = "chmod 755 run.sh; head -c 1024 x; sleep 0.5; curl 127.0.0.1:8080; echo 73519"
    assert flagged(leakscan, [action], [""]) == ["73519"]
    assert {"755", "1024", "0.5", "127.0.0.1", "8080"} <= EVERYDAY_NUMBERS


def test_one_step_arithmetic_of_numbers_in_view(leakscan: ModuleType) -> None:
    seen = "requests 1843\nfailed 37\nmean 12.3456 ms\na 1200.25 b 3210.25\n"
    actions = ["echo 2.01", "echo 12.35", "echo 4410.50", "echo 4410.5", "echo 1806", "echo 1807",
               "echo 68.02"]
    # 100*37/1843 = 2.0076; 12.3456 rounded; 1200.25 + 3210.25; 1843 - 37; but 1807 and
    # 68.02 are no single step from what is in view.
    assert flagged(leakscan, actions, [seen] + [""] * 6) == ["1807", "68.02"]


def test_option_names_and_plain_names(leakscan: ModuleType) -> None:
    action = ("python3 -c 'from app.settings import load_config' --no-cache-directory; "
              "grep -rn defaultdict_factory src; echo MODE=production_mode_x")
    # A flag's name and a name in code are vocabulary; a name given as a value is data.
    assert flagged(leakscan, [action], [""]) == ["production_mode_x"]


def test_quoted_strings_are_tokenised_not_taken_whole(leakscan: ModuleType) -> None:
    conf = "DEBUG=true\nmax_connections=100\n"
    actions = ["sed -i 's/^DEBUG=true/DEBUG=false/; s/connections=100/connections=250/' f",
               "sed -n '14,18p' f; awk -F, '{s+=$2} END {printf \"%.2f\\n\", s}' f",
               "echo 'p@ss!w0rd' 'tok=ab12cd'"]
    assert flagged(leakscan, actions, [conf, "", ""], instruction="set it to 250") == [
        "p@ss!w0rd", "tok=ab12cd"]
    leak = leakscan.scan_leaks(actions[2:], [""])[0]
    assert leak.rule == "unseen-part" and "its part 'w0rd'" in leak.why


def test_urls_are_cut_into_host_port_and_path(leakscan: ModuleType) -> None:
    actions = ["curl -s http://127.0.0.1:8123/healthz", "curl http://internal-api:8080/v1/items"]
    leaks = leakscan.scan_leaks(actions, ["", ""], instruction="check /healthz")
    assert [(x.value, x.kind, x.rule) for x in leaks] == [
        ("8123", "number", "unseen-number"),
        ("internal-api", "host", "unseen-host"),
        ("/v1/items", "path", "unseen-path"),
    ]


def test_every_flag_names_its_rule_value_and_place(leakscan: ModuleType) -> None:
    cases = load_corpus()
    for case in cases:
        for leak in scan_case(case, leakscan.LeakScanner):
            assert leak.rule in RULES
            assert leak.why.startswith(f"{leak.rule}: ") and repr(leak.value) in leak.why
            assert f"at turn {leak.turn}, character {leak.position}" in leak.why


def test_floors_on_the_labelled_corpus(leakscan: ModuleType) -> None:
    cases = load_corpus()
    assert len(cases) >= 150 and sum(c.label == "leak" for c in cases) >= 50
    figures = scanner_figures(cases, [scan_case(c, leakscan.LeakScanner) for c in cases])
    assert figures["missed"] == [] and figures["scanner_recall"] == 1.0
    assert figures["scanner_false_alarm_rate"] <= 0.15, figures["false_alarms"]


def test_the_corpus_file_is_what_its_specs_build(tmp_path: Path) -> None:
    rebuilt = tmp_path / "corpus.jsonl"
    subprocess.run([sys.executable, str(CORPUS.parent / "build.py"), str(rebuilt)], check=True,
                   capture_output=True, timeout=60)
    assert rebuilt.read_bytes() == CORPUS.read_bytes(), "corpus.jsonl is stale: rebuild it"
    cases = load_corpus()
    assert all(case.why for case in cases)
    assert all(case.planted for case in cases if case.label == "leak")
    assert len({case.id for case in cases}) == len(cases)
