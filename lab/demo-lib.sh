# Sourced by lab/demo-*.sh (from the repository root): run commands on the lab VMs, each shown first.
LAB="python3 lab/labctl.py ssh"

# A bold heading for the next step.
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# on HOST COMMAND...: print "HOST# COMMAND", then run it on that VM.
on() { host=$1; shift; printf '%s# %s\n' "$host" "$*"; $LAB "$host" "$*"; }
