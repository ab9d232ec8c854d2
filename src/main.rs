fn main() {
    std::process::exit(hsdiff::cli::main());
}
