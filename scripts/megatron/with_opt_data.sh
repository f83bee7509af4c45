#!/usr/bin/env bash
# Run inside a private mount namespace (`unshare --mount --propagation private`):
#   with_opt_data.sh ASSETS_DIR MEGATRON_LM_DIR COMMAND...
# shows ASSETS_DIR at /opt/data and MEGATRON_LM_DIR at /opt/megatron-lm, where Megatron-LM's
# tests look for their downloaded assets and for Megatron-LM itself, then runs COMMAND.
# /opt is replaced by a tmpfs holding bind mounts of everything that was there, plus the
# two; nothing outside this namespace sees any of it, and it all goes when COMMAND ends.
set -euo pipefail
assets=$1 megatron=$2
shift 2
original=$(dirname "$assets")/opt-original  # the real /opt, seen from inside only
mkdir -p "$original"
mount --rbind /opt "$original"
mount -t tmpfs -o mode=755 tokenloom-opt /opt
shopt -s dotglob nullglob
for entry in "$original"/*; do
    name=${entry##*/}
    case "$name" in data|megatron-lm) continue ;; esac
    if [ -L "$entry" ]; then
        ln -s "$(readlink "$entry")" "/opt/$name"
    elif [ -d "$entry" ]; then
        mkdir "/opt/$name" && mount --rbind "$entry" "/opt/$name"
    else
        touch "/opt/$name" && mount --bind "$entry" "/opt/$name"
    fi
done
mkdir /opt/data /opt/megatron-lm
mount --bind "$assets" /opt/data
mount --bind "$megatron" /opt/megatron-lm
exec "$@"
