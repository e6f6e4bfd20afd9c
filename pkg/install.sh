#!/usr/bin/env bash
# Build and install the C library of ntprofile into a prefix, in the layout cargo-c (`cargo cinstall`) gives
# Rust C libraries:
#
#   <includedir>/ntprofile.h
#   <libdir>/libntprofile.so.X.Y.Z, libntprofile.so.X -> .so.X.Y.Z, libntprofile.so -> .so.X   (SONAME .so.X)
#   <libdir>/libntprofile.a
#   <libdir>/pkgconfig/ntprofile.pc
#
# Usage: pkg/install.sh [--prefix DIR] [--libdir DIR] [--includedir DIR] [--destdir DIR]
#                       [--library-type cdylib|staticlib]... [--artifacts DIR]
#
#   --prefix        installation prefix (default /usr/local)
#   --libdir        library directory (default PREFIX/lib)
#   --includedir    header directory (default PREFIX/include)
#   --destdir       staging root prepended to every path written (DESTDIR for packagers; the .pc file keeps
#                   the final paths). The DESTDIR environment variable works too.
#   --library-type  install only this kind of library (repeatable; default both), as cargo-c's option: with
#                   only the static library installed, `pkg-config --static --libs ntprofile` links it.
#   --artifacts     take libntprofile.so and libntprofile.a from DIR instead of running
#                   `cargo build --release --lib` (the tests install what their own build produced).
#
# Why a script and not cargo-c itself: `cargo install cargo-c` compiles cargo-c together with the whole of
# cargo as a library (several hundred crates, much longer than building ntprofile); this script does the same
# install with the tools a C toolchain already has.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
prefix=/usr/local
libdir=
includedir=
destdir=${DESTDIR:-}
artifacts=
types=()

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed -e '$d' -e 's/^# \{0,1\}//'
}

while (($# > 0)); do
    case $1 in
        --prefix) prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#*=}; shift ;;
        --libdir) libdir=$2; shift 2 ;;
        --libdir=*) libdir=${1#*=}; shift ;;
        --includedir) includedir=$2; shift 2 ;;
        --includedir=*) includedir=${1#*=}; shift ;;
        --destdir) destdir=$2; shift 2 ;;
        --destdir=*) destdir=${1#*=}; shift ;;
        --library-type) types+=("$2"); shift 2 ;;
        --library-type=*) types+=("${1#*=}"); shift ;;
        --artifacts) artifacts=$2; shift 2 ;;
        --artifacts=*) artifacts=${1#*=}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "install.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

case $prefix in
    /*) ;;
    *) echo "install.sh: --prefix must be an absolute path, not '$prefix'" >&2; exit 2 ;;
esac
libdir=${libdir:-$prefix/lib}
includedir=${includedir:-$prefix/include}
((${#types[@]} > 0)) || types=(cdylib staticlib)
want_cdylib=0
want_staticlib=0
for t in "${types[@]}"; do
    case $t in
        cdylib) want_cdylib=1 ;;
        staticlib) want_staticlib=1 ;;
        *) echo "install.sh: --library-type is cdylib or staticlib, not '$t'" >&2; exit 2 ;;
    esac
done

# The version (the first `version = "..."` of the package's manifest) names the shared library's files.
version=$(sed -n 's/^version *= *"\([^"]*\)".*/\1/p' "$repo/Cargo.toml" | head -n 1)
if [[ ! $version =~ ^([0-9]+)\.([0-9]+)\.([0-9]+) ]]; then
    echo "install.sh: cannot read the package version from $repo/Cargo.toml" >&2
    exit 1
fi
major=${BASH_REMATCH[1]}

if [[ -z $artifacts ]]; then
    (cd "$repo" && cargo build --release --lib)
    target_dir=$(cd "$repo" && cargo metadata --format-version 1 --no-deps |
        sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    artifacts=${target_dir:-$repo/target}/release
fi
for f in $( ((want_cdylib)) && echo libntprofile.so) $( ((want_staticlib)) && echo libntprofile.a); do
    if [[ ! -f $artifacts/$f ]]; then
        echo "install.sh: $artifacts/$f does not exist (build with cargo build --release --lib)" >&2
        exit 1
    fi
done

inc=$destdir$includedir
lib=$destdir$libdir
install -d "$inc" "$lib" "$lib/pkgconfig"
install -m 0644 "$repo/include/ntprofile.h" "$inc/ntprofile.h"
if ((want_cdylib)); then
    install -m 0755 "$artifacts/libntprofile.so" "$lib/libntprofile.so.$version"
    ln -sfn "libntprofile.so.$version" "$lib/libntprofile.so.$major"
    ln -sfn "libntprofile.so.$major" "$lib/libntprofile.so"
fi
if ((want_staticlib)); then
    install -m 0644 "$artifacts/libntprofile.a" "$lib/libntprofile.a"
fi

# Libs.private: what a static link needs besides libntprofile.a, as
# `cargo rustc --lib --crate-type staticlib -- --print native-static-libs` reports it for the Rust standard
# library on x86_64-unknown-linux-gnu, with `-static` first: `pkg-config --static` output always follows the
# `-lntprofile` of `Libs`, and only a static link makes that `-lntprofile` take libntprofile.a when
# libntprofile.so sits beside it (the linker looks for the .so first in each directory). A static link takes
# libgcc's unwinder from libgcc_eh.a (gcc adds it), not -lgcc_s, which has no archive.
sed -e "s|@PREFIX@|$prefix|g" -e "s|@LIBDIR@|$libdir|g" -e "s|@INCLUDEDIR@|$includedir|g" \
    -e "s|@VERSION@|$version|g" "$repo/pkg/ntprofile.pc.in" >"$lib/pkgconfig/ntprofile.pc.tmp"
mv "$lib/pkgconfig/ntprofile.pc.tmp" "$lib/pkgconfig/ntprofile.pc"

echo "installed ntprofile $version into $destdir$prefix:"
echo "  $inc/ntprofile.h"
((want_cdylib)) && echo "  $lib/libntprofile.so.$version (+ libntprofile.so.$major, libntprofile.so)"
((want_staticlib)) && echo "  $lib/libntprofile.a"
echo "  $lib/pkgconfig/ntprofile.pc"
