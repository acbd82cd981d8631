//! A secret value held only in this process's memory: never printed (`Debug` is redacted) and
//! zeroed when dropped. The engine mints one (the agent's credential, `engine::credentials`) and a
//! zone injects it into a command's environment; neither needs the other to name the type.

use zeroize::Zeroize;

/// A secret: never printed (`Debug` is redacted), zeroed when dropped.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: String) -> Self {
        Secret(value)
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Secret([redacted])")
    }
}

impl Drop for Secret {
    fn drop(&mut self) {
        self.0.zeroize();
    }
}
