#!/usr/bin/env bash
# Sourced by ensure-redis.sh and ensure-valkey.sh: apt_install PACKAGE INSTEAD installs a
# Debian package (with sudo unless root), or stops saying so and what to do INSTEAD.
apt_install() {
  local sudo=sudo
  if [ "$(id -u)" -eq 0 ]; then sudo=""; fi
  export DEBIAN_FRONTEND=noninteractive
  $sudo apt-get update -qq >&2 && $sudo apt-get install -y -qq "$1" >&2 || {
    echo "could not install $1; $2" >&2
    exit 1
  }
}
