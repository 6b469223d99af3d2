//! When RocksDB comes prebuilt (`ROCKSDB_LIB_DIR`, see `scripts/rocksdb-env.sh`),
//! librocksdb-sys links the archive but not the C++ standard library it needs; link it here.
//! When librocksdb-sys compiles RocksDB itself, it links the C++ library already.

fn main() {
    println!("cargo:rerun-if-env-changed=ROCKSDB_LIB_DIR");
    println!("cargo:rerun-if-env-changed=ROCKSDB_STATIC");
    if std::env::var_os("ROCKSDB_LIB_DIR").is_some() {
        println!("cargo:rustc-link-lib=stdc++");
    }
}
