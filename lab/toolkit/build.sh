#!/usr/bin/env bash
# Copyright (c) gpuops.k8s contributors
# GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later
#
# Build the NVIDIA Container Toolkit from NVIDIA's Go source and publish it as a signed
# apt repository laid out like NVIDIA's, for the lab (no internet, so NVIDIA's own
# repository cannot be reached):
#   lab/toolkit/build.sh [VERSION...]     (default: v1.20.2 v1.17.8)
# Prints the repository's root as its last line:
#   ROOT/stable/deb/<arch>/   *.deb, Packages(.gz), Release, InRelease, Release.gpg
#   ROOT/gpgkey               the signing key, ASCII-armored
# as https://nvidia.github.io/libnvidia-container has them (apt source:
# `deb [signed-by=...] <url>/stable/deb/$(ARCH) /`, key at <url>/gpgkey).
#
# Source: `go mod download github.com/NVIDIA/nvidia-container-toolkit@VERSION` through the
# Go module proxy; nothing from it is kept in this tree. Each version is built the way its
# own Makefile builds its commands (`make cmds`: the same -ldflags, so `nvidia-ctk
# --version` prints the version) and packaged from its own packaging/debian: the package
# names, versions (versions.mk: PACKAGE_VERSION-PACKAGE_REVISION), control fields and
# dependencies, the files each package's .install lists (binaries from cmd/, units and udev
# rules from deployments/), NVIDIA's maintainer scripts, and at #DEBHELPER# what debhelper
# (compat 9, `dh --with systemd`) puts there for those files: enable and start the
# nvidia-cdi-refresh units, stop them on removal, dpkg-maintscript-helper for the
# .maintscript lines. /etc files are conffiles, as dh_installdeb makes them.
#
# What differs from NVIDIA's packages, and why:
# - Built here by dpkg-deb, not by NVIDIA's debuild container; each control paragraph
#   carries `Gpuops-Lab-Build:` saying so, and /usr/share/doc/<package>/README.gpuops-lab
#   names the module and this script. The key is a lab key made here, not NVIDIA's.
# - libnvidia-container (libnvidia-container1, libnvidia-container-tools: C, not on the
#   module proxy) is NOT built. nvidia-container-toolkit keeps NVIDIA's Depends on
#   libnvidia-container-tools, so apt refuses to install it from this repository; install
#   nvidia-container-toolkit-base (nvidia-ctk, nvidia-container-runtime, nvidia-cdi-hook,
#   the nvidia-cdi-refresh units) and run the runtime in CDI mode. No dependency is dropped.
# - No gitCommit in the binaries (the module proxy serves no git metadata): `nvidia-ctk
#   --version` prints the version without a `commit:` line.
#
# Cached outside the work tree under $GPUOPS_LAB_CACHE (default ~/.cache/gpuops-lab):
# binaries per version (toolkit-bin-<version>-<hash of this script and go version>), the
# repository per set of versions and key, and the lab signing key (toolkit-gpg, made once).
# Delete those directories to rebuild. Needs go (>= the module's go line), gcc (cgo),
# dpkg-deb, apt-ftparchive (apt-utils) and gpg.
set -euo pipefail
shopt -s inherit_errexit
MODULE=github.com/NVIDIA/nvidia-container-toolkit
# v1.20.2: the newest release the module proxy serves (v1.21.0 answers 403, 2026-11-28).
# v1.17.8: an older release for pinning across versions; it predates the nvidia-cdi-refresh
# units (v1.19.0), so the role's own refresh units are tested on it.
versions=("$@")
[ ${#versions[@]} -gt 0 ] || versions=(v1.20.2 v1.17.8)
cache=${GPUOPS_LAB_CACHE:-$HOME/.cache/gpuops-lab}
self=${BASH_SOURCE[0]}
say() { echo "toolkit/build.sh: $*" >&2; }

for tool in go gcc dpkg-deb apt-ftparchive gpg; do
  command -v "$tool" >/dev/null || { say "$tool is not on PATH (make lab-deps installs what the lab needs)"; exit 3; }
done
arch=$(dpkg --print-architecture)
gover=$(go env GOVERSION)
build_key=$(cat "$self" <(echo "$gover $arch") | sha256sum | cut -c1-12)

# --- the lab signing key (made once, kept: nodes that trusted it keep trusting it) ------
export GNUPGHOME=$cache/toolkit-gpg
if [ ! -f "$GNUPGHOME/.complete" ]; then
  rm -rf "$GNUPGHOME" && mkdir -p "$GNUPGHOME" && chmod 700 "$GNUPGHOME"
  say "making the lab repository's signing key in $GNUPGHOME"
  gpg --batch --quiet --passphrase '' --quick-gen-key \
    'gpuops.k8s lab apt repository (lab only, not NVIDIA) <lab@gpuops.invalid>' ed25519 sign never
  touch "$GNUPGHOME/.complete"
fi
fingerprint=$(gpg --batch --with-colons --list-secret-keys | awk -F: '$1 == "fpr" {print $10; exit}')

# --- per version: the module, its commands, its packages ---------------------------------
# build_version VERSION: prints the directory holding that version's .debs.
build_version() {
  local version=$1 src out lib_version lib_tag pkg_version revision deb_version cli_version
  [[ $version =~ ^v[0-9]+\.[0-9]+\.[0-9]+(-[0-9A-Za-z.]+)?$ ]] || { say "$version is not a release tag"; exit 2; }
  out=$cache/toolkit-bin-$version-$build_key
  if [ -f "$out/.complete" ]; then
    echo "$out"
    return
  fi
  say "downloading $MODULE@$version (module proxy)"
  src=$(go mod download -json "$MODULE@$version" | python3 -c 'import json, sys; print(json.load(sys.stdin)["Dir"])')
  rm -rf "$out" && mkdir -p "$out/bin" "$out/debs"

  # versions.mk: LIB_VERSION, LIB_TAG, PACKAGE_REVISION (the Makefile's CLI_VERSION and
  # the package version are made from them).
  mkvar() { awk -v name="$1" '$1 == name && $2 == ":=" {sub(/^[^=]*:= */, ""); print; exit}' "$src/versions.mk"; }
  lib_version=$(mkvar LIB_VERSION) lib_tag=$(mkvar LIB_TAG) revision=$(mkvar PACKAGE_REVISION)
  [ "v$lib_version${lib_tag:+-$lib_tag}" = "$version" ] || { say "$version: versions.mk says $lib_version ($lib_tag)"; exit 1; }
  pkg_version=$lib_version${lib_tag:+~$lib_tag}
  deb_version=$pkg_version-$revision
  cli_version=$lib_version${lib_tag:+-$lib_tag}

  # The Makefile's recipe for each command, which this script repeats: fail loudly if a
  # release changes it rather than build something the Makefile would not.
  # shellcheck disable=SC2016  # the Makefile's own text, $(...) included: not for bash to expand
  local recipe='go build -ldflags "-s -w '"'"'-extldflags=$(EXTLDFLAGS)'"'"' -X $(CLI_VERSION_PACKAGE).gitCommit=$(GIT_COMMIT) -X $(CLI_VERSION_PACKAGE).version=$(CLI_VERSION)" $(COMMAND_BUILD_OPTIONS) $(MODULE)/cmd/$(*)'
  grep -qF "$recipe" "$src/Makefile" || { say "$version: the Makefile's cmd recipe is not the one this script knows"; exit 1; }
  grep -qF 'EXTLDFLAGS = -Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy' "$src/Makefile" \
    || { say "$version: the Makefile's EXTLDFLAGS changed"; exit 1; }
  local ldflags="-s -w '-extldflags=-Wl,--export-dynamic -Wl,--unresolved-symbols=ignore-in-object-files -Wl,-z,lazy'"
  ldflags+=" -X $MODULE/internal/info.gitCommit= -X $MODULE/internal/info.version=$cli_version"

  # Every file a package's .install names comes from cmd/ (built) or deployments/
  # (copied), as in NVIDIA's Dockerfile.debian.
  local debian=$src/packaging/debian packages name
  packages=$(awk '$1 == "Package:" {print $2}' "$debian/control")
  local commands=() file
  for name in $packages; do
    [ -f "$debian/$name.install" ] || continue
    # (NVIDIA's .install files may lack a final newline.)
    while read -r file _ || [ -n "$file" ]; do
      [ -n "$file" ] && [ -d "$src/cmd/$file" ] && commands+=("$file")
    done <"$debian/$name.install"
  done
  # (CGO_CFLAGS: Go's default plus silence for go-nvml's hundreds of deprecation warnings.)
  local n=0 start=$SECONDS t
  for name in "${commands[@]}"; do
    n=$((n + 1)) t=$SECONDS
    say "building $name $version ($n/${#commands[@]})"
    (cd "$src" && GOFLAGS="-buildvcs=false -mod=readonly" \
      CGO_CFLAGS="-O2 -g -Wno-deprecated-declarations" nice -n 10 go build -ldflags "$ldflags" -o "$out/bin/$name" "$MODULE/cmd/$name")
    say "built $name in $((SECONDS - t)) s"
  done
  say "built ${#commands[@]} commands of $version in $((SECONDS - start)) s"
  local printed
  printed=$("$out/bin/nvidia-ctk" --version)
  [ "$printed" = "NVIDIA Container Toolkit CLI version $cli_version" ] \
    || { say "$version: nvidia-ctk --version prints '$printed', not $cli_version"; exit 1; }

  for name in $packages; do
    package "$src" "$out" "$name" "$version" "$deb_version" "$pkg_version"
  done
  touch "$out/.complete"
  echo "$out"
}

# The control paragraph of one package, with NVIDIA's prepare substitutions and the
# substvars debhelper fills (none of these packages gets a ${misc:*} value).
control_paragraph() {
  local control=$1 name=$2
  awk -v RS= -v name="$name" '$0 ~ "(^|\n)Package: " name "(\n|$)" {print; exit}' "$control"
}

# The #DEBHELPER# text for one maintainer script of one package.
debhelper_snippet() {
  local script=$1 units=$2 maintscript=$3 line quoted
  # debhelper's list of the units, each in single quotes ($units splits on purpose: names).
  # shellcheck disable=SC2086
  quoted=$(printf "'%s' " $units)
  if [ -n "$units" ]; then
    case $script in
      postinst)
        for unit in $units; do
          cat <<SNIPPET
# Automatically added by dh_systemd_enable
if [ "\$1" = "configure" ] || [ "\$1" = "abort-upgrade" ] || [ "\$1" = "abort-deconfigure" ] || [ "\$1" = "abort-remove" ] ; then
	deb-systemd-helper unmask '$unit' >/dev/null || true
	if deb-systemd-helper --quiet was-enabled '$unit'; then
		deb-systemd-helper enable '$unit' >/dev/null || true
	else
		deb-systemd-helper update-state '$unit' >/dev/null || true
	fi
fi
# End automatically added section
SNIPPET
        done
        cat <<SNIPPET
# Automatically added by dh_systemd_start
if [ "\$1" = "configure" ] || [ "\$1" = "abort-upgrade" ] || [ "\$1" = "abort-deconfigure" ] || [ "\$1" = "abort-remove" ] ; then
	if [ -z "\${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
		systemctl --system daemon-reload >/dev/null || true
		deb-systemd-invoke start $quoted>/dev/null || true
	fi
fi
# End automatically added section
SNIPPET
        ;;
      prerm)
        cat <<SNIPPET
# Automatically added by dh_systemd_start
if [ -z "\${DPKG_ROOT:-}" ] && [ -d /run/systemd/system ]; then
	deb-systemd-invoke stop $quoted>/dev/null || true
fi
# End automatically added section
SNIPPET
        ;;
      postrm)
        cat <<SNIPPET
# Automatically added by dh_systemd_start
if [ "\$1" = remove ] && [ -d /run/systemd/system ] ; then
	systemctl --system daemon-reload >/dev/null || true
fi
# End automatically added section
# Automatically added by dh_systemd_enable
if [ "\$1" = "purge" ]; then
	if [ -x "/usr/bin/deb-systemd-helper" ]; then
		deb-systemd-helper purge $quoted>/dev/null || true
	fi
fi
# End automatically added section
SNIPPET
        ;;
    esac
  fi
  if [ -n "$maintscript" ]; then
    echo "# Automatically added by dh_installdeb"
    while read -r line; do
      [ -n "$line" ] && echo "dpkg-maintscript-helper $line -- \"\$@\""
    done <<<"$maintscript"
    echo "# End automatically added section"
  fi
}

# package SRC OUT NAME VERSION DEB_VERSION PKG_VERSION: OUT/debs/NAME_DEB_VERSION_ARCH.deb
package() {
  local src=$1 out=$2 name=$3 version=$4 deb_version=$5 pkg_version=$6
  local debian=$src/packaging/debian tree file dest units="" maintscript="" script body
  tree=$(mktemp -d) && chmod 0755 "$tree"
  mkdir -p "$tree/DEBIAN" "$tree/usr/share/doc/$name"
  if [ -f "$debian/$name.install" ]; then
    while read -r file dest || [ -n "$file" ]; do
      [ -n "$file" ] || continue
      local from
      if [ -f "$out/bin/$file" ]; then
        from=$out/bin/$file
      elif [ -f "$src/deployments/systemd/$file" ]; then
        from=$src/deployments/systemd/$file
      elif [ -f "$src/deployments/udev/$file" ]; then
        from=$src/deployments/udev/$file
      else
        say "$version: $name.install names $file, which is neither a command nor under deployments/"
        exit 1
      fi
      # NVIDIA's .install lines: "FILE DIR" (into DIR) or "FILE DIR/NAME" (as NAME).
      case $dest in
        */) dest=$dest$file ;;
        *) [ "$(basename "$dest")" = "$file" ] || dest=$dest/$file ;;
      esac
      mkdir -p "$tree$(dirname "$dest")"
      # rules' override_dh_fixperms: 0755 for the commands, 0644 for the rest.
      if [ "$from" = "$out/bin/$file" ]; then
        install -m 0755 "$from" "$tree$dest"
      else
        install -m 0644 "$from" "$tree$dest"
      fi
      case $dest in
        /lib/systemd/system/*.service | /lib/systemd/system/*.path) units="$units $(basename "$dest")" ;;
      esac
    done <"$debian/$name.install"
  fi
  units=$(tr ' ' '\n' <<<"$units" | sed '/^$/d' | sort | tr '\n' ' ')
  units=${units% }
  [ ! -f "$debian/$name.maintscript" ] || maintscript=$(sed "s;@VERSION@;$deb_version;g" "$debian/$name.maintscript")
  install -m 0644 "$debian/copyright" "$tree/usr/share/doc/$name/copyright"
  cat >"$tree/usr/share/doc/$name/README.gpuops-lab" <<README
This package was built by the gpuops.k8s lab (lab/toolkit/build.sh), not by NVIDIA:
from the Go module $MODULE@$version (Go module proxy, $gover),
with the ldflags of that release's Makefile and the package layout of its packaging/debian.
libnvidia-container is not built by the lab: install nvidia-container-toolkit-base and
use the runtime's CDI mode.
README

  # /etc files are conffiles (dh_installdeb).
  if [ -d "$tree/etc" ]; then
    (cd "$tree" && find etc -type f | sed 's;^;/;' | sort) >"$tree/DEBIAN/conffiles"
  fi

  for script in preinst postinst prerm postrm; do
    local snippet
    snippet=$(debhelper_snippet "$script" "$units" "$maintscript")
    if [ -f "$debian/$name.$script" ]; then
      body=$(cat "$debian/$name.$script")
    elif [ -n "$snippet" ]; then
      body=$'#!/bin/sh\nset -e\n#DEBHELPER#'
    else
      continue
    fi
    # Replace the #DEBHELPER# line with the snippet (awk: the snippet may hold any text).
    SNIPPET=$snippet awk '$0 == "#DEBHELPER#" {print ENVIRON["SNIPPET"]; next} {print}' <<<"$body" >"$tree/DEBIAN/$script"
    chmod 0755 "$tree/DEBIAN/$script"
  done

  local paragraph
  # shellcheck disable=SC2016  # debhelper's literal ${misc:...} substitutions, matched as text
  paragraph=$(control_paragraph "$debian/control" "$name" \
    | sed -e "s;@VERSION@;$deb_version;g" \
      -e "s;@LIBNVIDIA_CONTAINER_TOOLS_VERSION@;$pkg_version-1;g" \
      -e 's;\${misc:Depends}, *;;' -e 's;\${misc:Depends};;' -e 's;\${misc:Pre-Depends};;' \
    | awk '!/^(Pre-)?Depends: *$/')
  # shellcheck disable=SC2016  # a literal '${' left over means a substitution this script does not know
  [[ $paragraph != *'@'*'@'* && $paragraph != *'${'* ]] || { say "$version: $name's control has an unknown substitution"; exit 1; }
  local section
  section=$(awk '$1 == "Section:" {print $2}' "$debian/control" | sed 's;@SECTION@;;')
  {
    sed -n '1p' <<<"$paragraph"
    echo "Source: $(awk '$1 == "Source:" {print $2; exit}' "$debian/control")"
    echo "Version: $deb_version"
    sed -n '/^Architecture:/d; /^Description:/,$d; 2,$p' <<<"$paragraph"
    echo "Architecture: $arch"
    awk '$1 == "Maintainer:" || $1 == "Homepage:" || $1 == "Priority:" {print; }' "$debian/control" | sort -u
    echo "Section: $section"
    echo "Installed-Size: $(du -sk --exclude=DEBIAN "$tree" | cut -f1)"
    echo "Gpuops-Lab-Build: built by the gpuops.k8s lab (lab/toolkit/build.sh) from $MODULE@$version; not a package built by NVIDIA"
    sed -n '/^Description:/,$p' <<<"$paragraph"
  } >"$tree/DEBIAN/control"
  dpkg-deb --root-owner-group -Zxz --build "$tree" "$out/debs/${name}_${deb_version}_$arch.deb" >/dev/null
  rm -rf "$tree"
  say "packaged $name $deb_version"
}

bins=()
for version in "${versions[@]}"; do
  bins+=("$(build_version "$version")")
done

# --- the repository: every version's packages, indexed and signed ------------------------
repo_key=$(printf '%s\n' "$build_key" "$fingerprint" "${bins[@]}" | sha256sum | cut -c1-12)
root=$cache/toolkit-repo-$repo_key
if [ ! -f "$root/.complete" ]; then
  rm -rf "$root" && mkdir -p "$root/stable/deb/$arch"
  for dir in "${bins[@]}"; do
    cp "$dir"/debs/*.deb "$root/stable/deb/$arch/"
  done
  (
    cd "$root/stable/deb/$arch"
    apt-ftparchive packages . >Packages
    gzip -9nkf Packages
    apt-ftparchive -o APT::FTPArchive::Release::Origin="gpuops.k8s lab" \
      -o APT::FTPArchive::Release::Label="NVIDIA Container Toolkit (lab build from source)" release . >Release
    gpg --batch --yes --local-user "$fingerprint" --clearsign -o InRelease Release
    gpg --batch --yes --local-user "$fingerprint" -abs -o Release.gpg Release
  )
  gpg --batch --armor --export "$fingerprint" >"$root/gpgkey"
  touch "$root/.complete"
  say "signed repository of ${versions[*]} in $root"
fi
echo "$root"
