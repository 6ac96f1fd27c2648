# Shared by record.sh and record-more.sh (copy it beside them): rec NAME EXT CMD... runs CMD, keeps its
# stdout in OUT/NAME.EXT (stderr in NAME.stderr when there is any) and logs NAME.EXT, the exit status and
# the command line to OUT/$TSV. Set out and TSV first.
export LC_ALL=C
T=/var/tmp
mkdir -p "$out"
: >"$out/$TSV"
rec() {  # rec NAME EXT CMD...
    local name=$1 ext=$2; shift 2
    "$@" >"$out/$name.$ext" 2>"$out/$name.stderr"
    local rc=$?
    [ -s "$out/$name.stderr" ] || rm -f "$out/$name.stderr"
    printf '%s\t%s\t%s\n' "$name.$ext" "$rc" "$*" >>"$out/$TSV"
}
