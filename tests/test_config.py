from __future__ import annotations

from pathlib import Path

import pytest

from rsr_async.config import CONFIG_DIR, Config, load_config
from rsr_async.errors import ConfigError
from rsr_async.harness import check_harness


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
    # load_config only consults the registry for keys a source set: the defaults must hold.
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
        ("[run]\nconcurrency = 0\n", r"bad\.toml.*run\.concurrency: expected a number > 0"),
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
