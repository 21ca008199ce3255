#!/bin/sh
# Reruns every scenario against the real Claude Code 2.1.332 (about 10 minutes), then prints
# the condensed timelines. Needs tmux, python3 and the ELF under ~/.cache/matrix-channel/
# (or CLAUDE_ELF=...). Each run leaves runs/<stamp>-<scenario>/ (server.log, debug.txt, screens).
cd "$(dirname "$0")" || exit 1
nice -n 10 python3 probe.py "${@:-all}" && python3 report.py
