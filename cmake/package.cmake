# Packaging: `cpack -G DEB` in a build tree configured with
# -DCMAKE_INSTALL_PREFIX=/usr makes one Debian package, dlock, holding
# everything `cmake --install` installs: the shared and static library,
# dlock.h, libdlock.pc, the dlock tool and the man pages dlock(1) and
# libdlock(3). Its Depends line comes from dpkg-shlibdeps (libhiredis,
# libssl3, libc); the library gets a shlibs file and an ldconfig trigger.
# Both need file(1) (scripts/deps.sh installs it).
# scripts/package.sh builds it and installs it into an empty root.
set(CPACK_PACKAGE_NAME dlock)
set(CPACK_PACKAGE_VENDOR "dlock")
set(CPACK_PACKAGE_CONTACT "dlock maintainers <dlock@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "distributed lock on Redis: libdlock and the dlock tool")
set(CPACK_PACKAGE_DESCRIPTION
    "A lock shared by many processes on many machines, kept in Redis:
the C library libdlock (renewed leases, fencing tokens, waiting without
polling, Redlock over several masters, TLS and ACL users) and dlock(1),
which runs a command under the lock like flock(1) across machines.")
set(CPACK_DEBIAN_PACKAGE_SECTION utils)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
# Building against it needs the -dev packages its libdlock.pc requires.
set(CPACK_DEBIAN_PACKAGE_SUGGESTS "libhiredis-dev, libssl-dev, redis-server")
set(CPACK_PACKAGING_INSTALL_PREFIX ${CMAKE_INSTALL_PREFIX})
set(CPACK_GENERATOR DEB)
include(CPack)
