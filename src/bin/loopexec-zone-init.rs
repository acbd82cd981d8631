//! `loopexec-zone-init`: the zone init executable (sandbox/src/init_exe.rs). A zone's pid 1,
//! cloned by loopexec's supervisor into the zone's namespaces, executes this small program instead
//! of the whole loopexec binary: it links the sandbox crate's zone side only. Started any other
//! way it does nothing.

fn main() {
    // Never returns when started as a zone init.
    sandbox::init::run_if_zone_init();
    eprintln!(
        "loopexec-zone-init: the zone init of loopexec's sandbox, started by loopexec itself only"
    );
    std::process::exit(2);
}
