/// Large blocks on transparent huge pages: fewer page faults on the forward's fresh buffers
/// (`hsdiff::huge_pages`).
#[global_allocator]
static ALLOCATOR: hsdiff::huge_pages::HugePages = hsdiff::huge_pages::HugePages;

fn main() {
    std::process::exit(hsdiff::cli::main());
}
