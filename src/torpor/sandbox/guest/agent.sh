#!/bin/sh
# torpor sandbox guest agent: one request at a time over the virtio-serial port given as $1.
#
# A request is one header line of space-separated tokens (file names base64-encoded), then the
# raw bytes the header announces. An exec's argv ends its header, shell-quoted by the host
# (each element in single quotes, a newline as '"$NL"'), for one `eval "set -- ..."` instead
# of a decoder process per element; the header is read by the shell's own `read`, and only
# one `head -c` per request reads the port (busybox head reads ahead through stdio). Every reply starts with a
# line "R <rid> <kind> <fields...>" and is followed by the raw bytes its fields announce; the
# host skips anything before the line that carries its own random rid (a reply to a host that
# died). Commands run as uid 1000 with an empty environment, in /work (the workspace disk);
# the port, the agent and the effect ledger (/ws/ops, on the workspace disk) are root's only.
#
#   PING rid                                   -> R rid ok
#   EXEC rid op timeout_s ro max stdin_len argv + stdin
#                                              -> R rid exit code timed_out replayed
#                                                 out_total err_total out_len err_len + bytes
#   STATUS rid op max                          -> R rid status absent|started
#                                                 | R rid status done <as exit> + bytes
#   WRITE rid mode len p64 + bytes             -> R rid wrote sha256 size
#   READ rid max p64                           -> R rid data total len + bytes
#   LS rid p64                                 -> R rid list len + bytes ("type size b64name" lines)
#   QUIT rid                                   -> (disks synced) R rid ok, then the VM powers off
#   any failure                                -> R rid err msg64
#
# op is "-" for an exec that is not an effect, else a hex id: an op that is done is never run
# again (its recorded result is the reply, replayed=1); one started by a VM that died before
# it finished is refused with "R rid unknown" (it may have run partly).
set -f
NL='
'
PORT=$1
IDLE=${TORPOR_IDLE_S:-900}
# su (busybox's: no PAM) drops to the agent user; `exec "$0" "$@"` keeps argv as given; the
# "--" keeps su's getopt (which permutes) from taking a "-c" of the command as its own.
AS_CMD='exec "$0" "$@"'
AS="su -s /bin/sh -c"
ENV="env -i PATH=/bin:/sbin HOME=/work USER=agent LOGNAME=agent TERM=dumb LANG=C"
T=/tmp/.torpor
mkdir -p $T/x && chmod 0700 $T
exec 3<>"$PORT"

b64d() { printf '%s' "$1" | base64 -d; }
err() { printf 'R %s err %s\n' "$1" "$(printf '%s' "$2" | base64 | tr -d '\n')" >&3; }
recv() { # recv N FILE: exactly N raw bytes from the port into FILE
  if [ "$1" -gt 0 ]; then head -c "$1" <&3 >"$2"; else : >"$2"; fi
}
size() { stat -c %s "$1" 2>/dev/null || echo 0; }
min() { echo $(( $1 < $2 ? $1 : $2 )); }

send_exec() { # send_exec rid kind dir max replayed (few forks: each costs ~20 ms under TCG)
  set -- "$@" $(stat -c %s "$3/out" "$3/err")
  ot=$6 et=$7 ol=$(( $6 < $4 ? $6 : $4 )) el=$(( $7 < $4 ? $7 : $4 ))
  read -r code tmo <"$3/code"
  printf 'R %s %s %s %s %s %s %s %s %s\n' "$1" "$2" "$code" "$tmo" "$5" "$ot" "$et" "$ol" "$el" >&3
  [ "$ol" -gt 0 ] && head -c "$ol" "$3/out" >&3
  [ "$el" -gt 0 ] && head -c "$el" "$3/err" >&3
}

do_exec() { # rid "op timeout_s ro max stdin_len argv..." + stdin
  rid=$1 r=$2
  op=${r%% *}; r=${r#* }; t=${r%% *}; r=${r#* }; ro=${r%% *}; r=${r#* }
  max=${r%% *}; r=${r#* }; n=${r%% *}; argv=${r#* }
  recv "$n" $T/in
  eval "set -- $argv"
  if [ "$op" = "-" ]; then d=$T/x
  else
    d=/ws/ops/$op
    if [ -e "$d/done" ]; then send_exec "$rid" exit "$d" "$max" 1; return; fi
    if [ -e "$d/started" ]; then printf 'R %s unknown\n' "$rid" >&3; return; fi
    mkdir -p "$d" && : >"$d/started" && sync
    echo "torpor-agent: op $op started"
  fi
  [ -e "$d/timedout" ] && rm -f "$d/timedout"
  [ "$ro" = 1 ] && mount -o remount,bind,ro /work
  cd /work
  setsid $ENV $AS "$AS_CMD" -- agent "$@" <$T/in >"$d/out" 2>"$d/err" &
  pid=$!
  (sleep "$t"; : >"$d/timedout"; kill -9 -"$pid" 2>/dev/null; kill -9 "$pid" 2>/dev/null) &
  wd=$!
  wait "$pid"; code=$?
  kill "$wd" 2>/dev/null
  cd /
  [ "$ro" = 1 ] && mount -o remount,bind,rw /work
  tmo=0; [ -e "$d/timedout" ] && tmo=1 && rm -f "$d/timedout"
  echo "$code $tmo" >"$d/code"
  if [ "$op" != "-" ]; then : >"$d/done"; sync; echo "torpor-agent: op $op done"; fi
  send_exec "$rid" exit "$d" "$max" 0
}

do_status() { # rid op max
  d=/ws/ops/$2
  if [ -e "$d/done" ]; then send_exec "$1" "status done" "$d" "$3" 1
  elif [ -e "$d/started" ]; then printf 'R %s status started\n' "$1" >&3
  else printf 'R %s status absent\n' "$1" >&3; fi
}

do_write() { # rid mode len p64
  recv "$3" $T/w.$1
  p=$(b64d "$4"; echo .); p=${p%.}; p=${p#x}
  if (cd /work && $AS "$AS_CMD" -- agent sh -c 'mkdir -p "$(dirname "$1")" && cat >"$1" && chmod "$2" "$1"' \
        sh "$p" "$2" <$T/w.$1) 2>$T/e.$1; then
    printf 'R %s wrote %s %s\n' "$1" "$(sha256sum $T/w.$1 | cut -c1-64)" "$3" >&3
  else err "$1" "write $p: $(cat $T/e.$1)"; fi
  rm -f $T/w.$1 $T/e.$1
}

do_read() { # rid max p64
  p=$(b64d "$3"; echo .); p=${p%.}; p=${p#x}
  if (cd /work && $AS "$AS_CMD" -- agent cat "$p") >$T/r.$1 2>$T/e.$1; then
    tot=$(size $T/r.$1); l=$(min "$tot" "$2")
    printf 'R %s data %s %s\n' "$1" "$tot" "$l" >&3
    [ "$l" -gt 0 ] && head -c "$l" $T/r.$1 >&3
  else err "$1" "read $p: $(cat $T/e.$1)"; fi
  rm -f $T/r.$1 $T/e.$1
}

do_ls() { # rid p64
  p=$(b64d "$2"; echo .); p=${p%.}; p=${p#x}
  if (cd /work && $AS "$AS_CMD" -- agent sh -c 'cd "$1" || exit 1
      for f in * .*; do
        [ "$f" = . ] || [ "$f" = .. ] && continue
        [ -e "$f" ] || [ -L "$f" ] || continue
        if [ -L "$f" ]; then k=l; elif [ -d "$f" ]; then k=d; elif [ -f "$f" ]; then k=f; else k=o; fi
        echo "$k $(stat -c %s "$f") $(printf %s "$f" | base64 | tr -d "\n")"
      done' sh "$p") >$T/l.$1 2>$T/e.$1; then
    printf 'R %s list %s\n' "$1" "$(size $T/l.$1)" >&3
    cat $T/l.$1 >&3
  else err "$1" "ls $p: $(cat $T/e.$1)"; fi
  rm -f $T/l.$1 $T/e.$1
}

last=$(date +%s)
while :; do
  if ! read -r -t 5 verb rid rest <&3; then
    now=$(date +%s)
    [ $((now - last)) -ge "$IDLE" ] && { echo "torpor-agent: idle for ${IDLE}s"; break; }
    [ -z "$verb" ] && usleep 100000
    continue
  fi
  last=$(date +%s)
  case "$verb" in
    PING) printf 'R %s ok\n' "$rid" >&3 ;;
    EXEC) do_exec "$rid" "$rest" ;;
    STATUS) set -- $rest; do_status "$rid" "$@" ;;
    WRITE) set -- $rest; do_write "$rid" "$@" ;;
    READ) set -- $rest; do_read "$rid" "$@" ;;
    LS) set -- $rest; do_ls "$rid" "$@" ;;
    QUIT) sync; printf 'R %s ok\n' "$rid" >&3; break ;;
    *) [ -n "$rid" ] && err "$rid" "unknown request $verb" ;;
  esac
done
