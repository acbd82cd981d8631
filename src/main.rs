fn main() {
    std::process::exit(loopexec::cli::main_entry());
}
