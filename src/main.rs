fn main() {
    // First, before any thread exists: a zone init never returns from here.
    sandbox::init::run_if_zone_init();
    std::process::exit(loopexec::cli::main_with_args(std::env::args_os().collect()));
}
