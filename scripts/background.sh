#!/usr/bin/env bash
# A recording run that may outlast one device call (10 minutes at most): started in a process session of its
# own, it survives the call's end while the machine stays warm (30 s after a call), and the next call waits
# for it. Its output goes to /tmp/background/NAME.log, its exit status to NAME.rc when it ends.
# Start it from a copy outside the paths a device call carries (cp -r .snap /tmp/run && cd /tmp/run): each
# call replaces what it carries, and a job whose folder is replaced loses its working tree and its records.
#   scripts/background.sh start NAME COMMAND...   start COMMAND (in this folder, with this environment)
#   scripts/background.sh wait NAME SECONDS       wait until NAME ends or SECONDS pass, then show its log's tail
#                                                 (TAIL lines, 60) and say which; exit 0 once it ended with 0
set -u
dir=/tmp/background
mkdir -p "$dir"
case ${1:-} in
start)
  name=$2; shift 2
  rm -f "$dir/$name.rc"
  setsid bash -c '"$@"; echo $? > "$0"' "$dir/$name.rc" "$@" > "$dir/$name.log" 2>&1 < /dev/null &
  echo "started $name in the background (pid $!)"
  ;;
wait)
  name=$2; end=$((SECONDS + $3))
  while [ ! -f "$dir/$name.rc" ] && [ $SECONDS -lt "$end" ]; do sleep 2; done
  tail -n "${TAIL:-60}" "$dir/$name.log"
  if [ -f "$dir/$name.rc" ]; then
    echo "$name ended with exit status $(cat "$dir/$name.rc")"
    exit "$(cat "$dir/$name.rc")"
  fi
  echo "$name is still running: wait again in the next call (the machine goes back 30 s after a call)"
  exit 124
  ;;
*)
  echo "usage: $0 start NAME COMMAND... | wait NAME SECONDS" >&2
  exit 2
  ;;
esac
