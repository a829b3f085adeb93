//! mesh-host: the node agent of a self-hosted fleet mesh. `main` sets up logging, runs the
//! command line and exits with its code; everything else is in the library.

fn main() {
    let args: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    mesh_host::init_logging(&args);
    std::process::exit(mesh_host::main_with_args(args));
}
