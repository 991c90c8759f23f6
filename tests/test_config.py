from __future__ import annotations

import re
import subprocess
import sys
import typing
from pathlib import Path

import msgspec
import pytest

from rsr_async.config import CONFIG_DIR, HARNESS_NAMES, Config, load_config
from rsr_async.errors import ConfigError
from rsr_async.harness import BUILT, check_harness
from tests.conftest import run_cli_env


def test_default_toml_spells_out_the_defaults() -> None:
    assert load_config([CONFIG_DIR / "default.toml"]) == Config()
    text = (CONFIG_DIR / "default.toml").read_text()
    for section, values in Config().to_dict().items():
        assert f"[{section}]" in text
        for key in values:
            assert f"\n{key} = " in text or f"# {key} is unset" in text, f"{section}.{key}"


def test_paper_config_has_the_paper_numbers() -> None:
    cfg = load_config(["paper"])
    assert cfg.run.harnesses == ("terminus2", "statem", "rsrt")
    assert cfg.rsr.runbooks_per_source == 4
    assert cfg.rsr.executions_per_runbook == 4
    assert cfg.rsr.executor_temperature == 0.7
    assert cfg.rsr.rsrt_wall_clock_min == 180
    assert cfg.rsr.executor_harness == "terminus2"
    assert cfg.harness.max_turns == 200
    text = (CONFIG_DIR / "paper.toml").read_text()
    assert 'harnesses = ["terminus2", "statem", "rsrt"]' in text


def test_default_harnesses_are_built() -> None:
    # Config validates names against its own list (config imports nothing above it): the
    # registry must build exactly those, and the defaults must name built harnesses.
    assert tuple(BUILT) == HARNESS_NAMES
    for name in (*Config().run.harnesses, Config().rsr.executor_harness):
        check_harness(name)


@pytest.mark.parametrize(
    ("text", "error", "expected"),
    [
        ("[run]\nharnesses = ['terminus2', 'terminus3']\n", ConfigError,
         r"bad\.toml: run\.harnesses: unknown harness 'terminus3': expected one of terminus2, statem, rsrt"),
        ("[rsr]\nexecutor_harness = 'Terminus2'\n", ConfigError,
         r"bad\.toml: rsr\.executor_harness: unknown harness 'Terminus2'"),
    ],
)
def test_bad_harness_names_fail_at_load_naming_file_and_key(
    tmp_path: Path, text: str, error: type[Exception], expected: str
) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    with pytest.raises(error, match=expected):
        load_config([bad])


def test_harness_errors_name_the_source_that_set_the_value(tmp_path: Path) -> None:
    good = tmp_path / "good.toml"
    good.write_text("[run]\nharnesses = ['terminus2']\n")
    with pytest.raises(ConfigError, match=r"^--set run\.harnesses=\['x'\]: run\.harnesses: unknown harness 'x'"):
        load_config([good], ["run.harnesses=['x']"])
    with pytest.raises(ConfigError, match=r"^command line: run\.harnesses: unknown harness 'nope'"):
        load_config([good], values={"run": {"harnesses": ["nope"]}})
    # a later source that fixes the value wins: the earlier file is not blamed
    assert load_config(["paper"], ["run.harnesses=['terminus2']"]).run.harnesses == ("terminus2",)


def test_layering_files_then_set_then_flags(tmp_path: Path) -> None:
    f = tmp_path / "a.toml"
    f.write_text("[run]\nconcurrency = 7\nattempts = 3\n[llm]\nurls = ['http://127.0.0.1:1']\n")
    cfg = load_config([f], ["run.attempts=5", "llm.model=m1"], {"run": {"seed": 9}})
    assert (cfg.run.concurrency, cfg.run.attempts, cfg.run.seed) == (7, 5, 9)
    assert cfg.llm.urls == ("http://127.0.0.1:1",)
    assert cfg.llm.model == "m1"
    assert cfg.llm.max_new_tokens == Config().llm.max_new_tokens


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[run]\nconcurency = 4\n", r"bad\.toml.*unknown field `concurency`.*run"),
        ("[run]\nconcurrency = 'many'\n", r"bad\.toml.*Expected `int`, got `str`.*run\.concurrency"),
        ("[run]\nconcurrency = 0\n", r"bad\.toml: run\.concurrency: expected an integer >= 1, got 0$"),
        ("[llm]\napi = 'grpc'\n", r"bad\.toml.*llm\.api"),
        ("[run\nconcurrency = 4\n", r"bad\.toml: invalid TOML"),
        ("[nonsense]\nx = 1\n", r"bad\.toml.*unknown field `nonsense`"),
    ],
)
def test_bad_files_name_file_key_and_expectation(tmp_path: Path, text: str, expected: str) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=expected):
        load_config([bad])


def test_missing_file_is_named(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"nope\.toml: config file not found"):
        load_config([tmp_path / "nope.toml"])


def test_bad_override_names_it() -> None:
    with pytest.raises(ConfigError, match=r"--set run\.attempts=-1.*run\.attempts"):
        load_config([], ["run.attempts=-1"])
    with pytest.raises(ConfigError, match="expected section.key=value"):
        load_config([], ["attempts"])


def test_config_is_frozen() -> None:
    cfg = Config()
    with pytest.raises(AttributeError):
        cfg.run = cfg.run  # type: ignore[misc]


# -- every numeric setting is bounded (issue 15) -------------------------------------

BAD_VALUES = [
    # (override, what the one-line error must say)
    ("sandbox.max_concurrent_verifiers=0", r"sandbox\.max_concurrent_verifiers: expected an integer >= 1, got 0$"),
    ("sandbox.api_timeout_s=-1", r"sandbox\.api_timeout_s: expected a number > 0\.0, got -1$"),
    ("sandbox.api_timeout_s=nan", r"sandbox\.api_timeout_s: expected a number > 0\.0, got nan$"),
    ("sandbox.command_timeout_s=inf", r"sandbox\.command_timeout_s: expected a number <= 31536000\.0, got inf$"),
    ("sandbox.default_memory_mb=1", r"sandbox\.default_memory_mb: expected an integer >= 6, got 1$"),
    ("sandbox.warm_pool=-1", r"sandbox\.warm_pool: expected an integer >= 0, got -1$"),
    ("sandbox.build_concurrency=0", r"sandbox\.build_concurrency: expected an integer >= 1"),
    ("sandbox.max_concurrent_starts=0", r"sandbox\.max_concurrent_starts: expected an integer >= 1"),
    ("llm.read_timeout_s=0", r"llm\.read_timeout_s: expected a number > 0\.0, got 0$"),
    ("llm.total_timeout_s=-inf", r"llm\.total_timeout_s: expected a number > 0\.0, got -inf$"),
    ("llm.temperature=nan", r"llm\.temperature: expected a number >= 0\.0, got nan$"),
    ("llm.top_p=1.5", r"llm\.top_p: expected a number <= 1\.0, got 1\.5$"),
    ("llm.balance_rel_threshold=0.5", r"llm\.balance_rel_threshold: expected a number >= 1\.0"),
    ("llm.breaker_failures=0", r"llm\.breaker_failures: expected an integer >= 1"),
    ("harness.max_duration_s=-1", r"harness\.max_duration_s: expected a number >= 0\.0"),
    ("engine.metrics_port=70000", r"engine\.metrics_port: expected an integer <= 65535, got 70000$"),
    ("engine.job_deadline_s=nan", r"engine\.job_deadline_s: expected a number >= 0\.0, got nan$"),
    ("engine.grace_period_s=inf", r"engine\.grace_period_s: expected a number <= 31536000\.0, got inf$"),
    # Upper bounds (issue 30): a typo far past any real setting fails here, not in the loop.
    ("run.concurrency=99999999999999999999", r"run\.concurrency: expected an integer <= 1000000, got 99999999999999999999$"),
    ("llm.total_timeout_s=1e300", r"llm\.total_timeout_s: expected a number <= 31536000\.0, got 1e\+300$"),
    ("sandbox.default_cpus=1e9", r"sandbox\.default_cpus: expected a number <= 1024\.0, got 1000000000\.0$"),
    ("run.seed=99999999999999999999", r"run\.seed: expected an integer <= 9223372036854775807"),
    ("llm.urls=['http://127.0.0.1:99999']", r"llm\.urls: 'http://127\.0\.0\.1:99999' \(--llm-url\): not a valid URL \(Port out of range"),
    ("llm.urls=['http://[::1']", r"llm\.urls: 'http://\[::1' \(--llm-url\): not a valid URL \(Invalid IPv6 URL\)$"),
    ("llm.urls=['ftp://x']", r"llm\.urls: 'ftp://x' \(--llm-url\): expected an http:// or https:// URL"),
    ("llm.urls=['http://:80']", r"llm\.urls: 'http://:80' \(--llm-url\): the URL names no host$"),
    ("rsr.validation_share=2", r"rsr\.validation_share: expected a number <= 1\.0, got 2$"),
    ("rsr.critic_ngram=0", r"rsr\.critic_ngram: expected an integer >= 1"),
    ("sim.port=-1", r"sim\.port: expected an integer >= 0, got -1$"),
    ("sim.error_rate=1.5", r"sim\.error_rate: expected a number <= 1\.0"),
    ("run.attempts=0", r"run\.attempts: expected an integer >= 1, got 0$"),
    ("run.stages=[]", r"run\.stages: no stage; expected some of discover"),
]


@pytest.mark.parametrize(("override", "expected"), BAD_VALUES)
def test_bad_values_fail_at_load_naming_the_key(override: str, expected: str) -> None:
    with pytest.raises(ConfigError, match=rf"^--set {re.escape(override)}: {expected}") as info:
        load_config([], [override])
    assert "\n" not in str(info.value)


def test_bad_values_in_a_file_name_the_file(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[sandbox]\nmax_concurrent_verifiers = 0\n")
    with pytest.raises(ConfigError, match=r"bad\.toml: sandbox\.max_concurrent_verifiers: expected an integer >= 1"):
        load_config([bad])


def _numeric_fields() -> list[tuple[str, str, type]]:
    """(section, key, int or float) for every numeric setting, read off the Structs."""
    out = []
    for section in msgspec.structs.fields(Config):
        struct = section.type
        for field in msgspec.structs.fields(struct):
            kinds = {t for t in (int, float) if _holds(field.type, t)}
            if kinds:
                out.append((section.name, field.name, float if float in kinds else int))
    return out


def _holds(annotation: object, kind: type) -> bool:
    if annotation is kind:
        return True
    return any(_holds(arg, kind) for arg in typing.get_args(annotation))


UNBOUNDED = {("run", "seed"), ("sim", "seed")}
"""Seeds take any integer."""


def test_every_numeric_setting_has_a_bound() -> None:
    fields = _numeric_fields()
    assert len(fields) > 50  # the walk found the settings
    for section, key, kind in fields:
        if (section, key) in UNBOUNDED:
            continue
        # Every bound in config.py excludes negatives: -1 is refused everywhere.
        with pytest.raises(ConfigError, match=rf"{section}\.{key}: expected"):
            load_config([], [f"{section}.{key}=-1"])
        if kind is float:
            for bad in ("nan", "inf", "-inf"):
                with pytest.raises(ConfigError, match=rf"{section}\.{key}: expected"):
                    load_config([], [f"{section}.{key}={bad}"])
        # ... and far past any real setting is refused too (issue 30).
        with pytest.raises(ConfigError, match=rf"{section}\.{key}: expected"):
            load_config([], [f"{section}.{key}={'1e300' if kind is float else 10**20}"])


CLI_BAD = [
    (["--set", "sandbox.max_concurrent_verifiers=0"], "sandbox.max_concurrent_verifiers: expected an integer >= 1"),
    (["--set", "sandbox.api_timeout_s=-1"], "sandbox.api_timeout_s: expected a number > 0.0, got -1"),
    (["--set", "llm.read_timeout_s=nan"], "llm.read_timeout_s: expected a number > 0.0, got nan"),
    (["--metrics-port", "70000"], "--metrics-port: expected a port in 0..65535"),
    (["--concurrency", "0"], "--concurrency: expected an integer from 1 to 1000000, got 0"),
    (["--attempts", "-2"], "--attempts: expected an integer from 1 to 1000000, got -2"),
    (["--sim-servers", "0"], "--sim-servers: expected an integer from 1 to 64, got 0"),
    (["--sim-servers", "100000"], "--sim-servers: expected an integer from 1 to 64, got 100000"),
    (["--concurrency", "99999999999999999999"], "--concurrency: expected an integer from 1 to 1000000"),
    (["--stages", ""], "run.stages: no stage; expected some of discover"),
    (["--llm-url", "http://127.0.0.1:99999"], "'http://127.0.0.1:99999' (--llm-url): not a valid URL (Port out of range"),
    (["--llm-url", "http://[::1"], "'http://[::1' (--llm-url): not a valid URL (Invalid IPv6 URL)"),
    (["--llm-url", "ftp://x"], "'ftp://x' (--llm-url): expected an http:// or https:// URL"),
]


def _run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "rsr_async", "run", *args], env=run_cli_env(), cwd=cwd,
        capture_output=True, text=True, timeout=120,
    )


def _one_line_error(out: subprocess.CompletedProcess[str], expected: str) -> None:
    assert out.returncode in (1, 2), out.stderr
    assert "Traceback" not in out.stderr, out.stderr
    lines = [line for line in out.stderr.splitlines() if "error" in line]
    assert len(lines) == 1, out.stderr
    assert expected in lines[0], out.stderr


@pytest.mark.parametrize(("args", "expected"), CLI_BAD)
def test_cli_refuses_bad_values_in_one_line(tmp_path: Path, args: list[str], expected: str) -> None:
    _one_line_error(_run_cli(*args, cwd=tmp_path), expected)
    assert not (tmp_path / "runs").exists()  # refused before anything was created


def test_cli_refuses_a_run_dir_that_is_a_file(tmp_path: Path) -> None:
    file = tmp_path / "results.db"
    file.write_bytes(b"keep me")
    out = _run_cli("--run-dir", str(file), cwd=tmp_path)
    _one_line_error(out, f"run directory {file}: exists and is not a directory")
    assert file.read_bytes() == b"keep me"  # nothing stored is touched


def test_cli_refuses_a_run_dir_below_a_file(tmp_path: Path) -> None:
    file = tmp_path / "notes.txt"
    file.write_text("keep me")
    out = _run_cli("--run-dir", str(file / "run"), cwd=tmp_path)
    _one_line_error(out, f"run directory {file / 'run'}: cannot create it: Not a directory")
    assert file.read_text() == "keep me"
