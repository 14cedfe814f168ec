fn main() {
    eprintln!("llm-failover: render and validate are not built yet");
    std::process::exit(2);
}
