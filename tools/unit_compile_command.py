#!/usr/bin/env python3
"""Prints the shell command that compiles one translation unit as the build does, with its
object written to OBJ instead and ptxas made verbose (-Xptxas -v), from the build's
compile_commands.json; prints nothing when SOURCE is not in it. Used by tools/ptxas_report.sh
and tools/sass_report.sh.
  tools/unit_compile_command.py COMPILE_COMMANDS_JSON SOURCE_ABSOLUTE_PATH OBJ"""
import json
import shlex
import sys


def main():
    db, src, obj = sys.argv[1:]
    for entry in json.load(open(db)):
        if entry["file"] == src:
            args = shlex.split(entry["command"])
            i = args.index("-o")
            args[i + 1] = obj
            print("cd " + shlex.quote(entry["directory"]) + " && " +
                  shlex.join(args[:i] + ["-Xptxas", "-v"] + args[i:]))
            return


if __name__ == "__main__":
    main()
