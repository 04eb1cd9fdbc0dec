"""Stand-in for vLLM's argument parser class (tests/bench/fakevllm: see fake_cli.py)."""

import argparse

FlexibleArgumentParser = argparse.ArgumentParser
