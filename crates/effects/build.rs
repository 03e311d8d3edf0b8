//! Builds the preload library of `listen: {inject: true}`
//! (inject/supervise_inject.c) with the system's C compiler, as a shared
//! object the binary carries (`include_bytes!` in effects::inject).

fn main() {
    let source = "inject/supervise_inject.c";
    println!("cargo:rerun-if-changed={source}");
    let out = std::path::PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let library = out.join("libsupervise_inject.so");
    let compiler = cc::Build::new().get_compiler();
    let status = compiler
        .to_command()
        .args([
            "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-o",
        ])
        .arg(&library)
        .arg(source)
        .arg("-ldl")
        .status()
        .expect("the C compiler runs (install gcc)");
    assert!(status.success(), "building {source} failed");
}
