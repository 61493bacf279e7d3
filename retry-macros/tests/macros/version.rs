//! The expansion names `::retry_toolkit::__private_{major}_{minor}` of this crate's version, and
//! retry-toolkit mounts that module under its own version: the two crates must release with one
//! version (both take the workspace version, and retry-toolkit pins retry-macros with `=`).

#[test]
fn retry_toolkit_has_the_version_of_retry_macros() {
    // After a minor version bump this path no longer compiles: rename the module in
    // retry-toolkit's lib.rs and here.
    assert_eq!(
        retry_toolkit::__private_0_1::VERSION,
        env!("CARGO_PKG_VERSION")
    );
}

#[test]
fn the_expansion_names_the_module_retry_toolkit_has() {
    // Compiles only if the path the macro generates exists in this retry-toolkit.
    #[retry_toolkit::retry(max_attempts = 2)]
    async fn once() -> Result<u8, std::io::Error> {
        Ok(1)
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    assert_eq!(runtime.block_on(once()).unwrap(), 1);
}
