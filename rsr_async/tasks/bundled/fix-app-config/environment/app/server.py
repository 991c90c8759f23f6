"""Tiny service; --check validates configuration and exits."""
import configparser
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def load() -> configparser.ConfigParser:
    cp = configparser.ConfigParser()
    cp.read(os.path.join(HERE, "conf", "app.ini"))
    overrides = os.path.join(HERE, "conf", "overrides.ini")
    if os.path.exists(overrides):
        cp.read(overrides)
    return cp


def validate(cp: configparser.ConfigParser) -> None:
    port = cp.getint("server", "port")
    if not 1024 <= port <= 65535:
        raise SystemExit("config error: invalid value")
    if cp.get("server", "bind") not in ("127.0.0.1", "0.0.0.0", "::"):
        raise SystemExit("config error: invalid value")
    logdir = cp.get("logging", "directory")
    if not os.path.isdir(logdir) or not os.access(logdir, os.W_OK):
        raise SystemExit("config error: bad path")
    level = cp.get("logging", "level")
    if level not in ("DEBUG", "INFO", "WARNING", "ERROR"):
        raise SystemExit("config error: invalid value")
    if cp.getint("cache", "max_mb") > cp.getint("cache", "limit_mb"):
        raise SystemExit("config error: inconsistent values")
    for name in cp.get("plugins", "enabled").split(","):
        if not os.path.exists(os.path.join(HERE, "plugins", name.strip() + ".py")):
            raise SystemExit("config error: missing file")


if __name__ == "__main__":
    cfg = load()
    validate(cfg)
    if "--check" in sys.argv:
        print("config ok")
        sys.exit(0)
    print("serving on", cfg.get("server", "bind"), cfg.getint("server", "port"))
