//! Category 6, inherited file descriptors: the harness leaks a host file (the secret) as fd 9 and
//! a unix socket as fd 10 into loopexec without CLOEXEC; the zone must see only stdio.

use crate::common::{Scene, Zone, LEAKED_FILE_FD};

#[test]
fn only_stdio_reaches_the_zone() {
    let scene = Scene::new();
    Zone::new(&scene).run("fds", &["open_fds"]).assert_blocked("open_fds", &["only_stdio"]);
}

#[test]
fn leaked_host_file_descriptor_is_closed() {
    let scene = Scene::new();
    let fd = LEAKED_FILE_FD.to_string();
    Zone::new(&scene).run("fds", &["read_leaked_fd", &fd]).assert_blocked("read_leaked_fd", &["EBADF"]);
}
