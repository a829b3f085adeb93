//! mesh-host: the node agent of a self-hosted fleet mesh. `main` sets up logging, runs the
//! command line and exits with its code; everything else is in the library.

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn"))
        .format_timestamp(None)
        .init();
    std::process::exit(mesh_host::main_with_args(std::env::args().skip(1)));
}
