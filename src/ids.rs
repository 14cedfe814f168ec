//! Typed ids for what the validated configuration numbers, so no caller indexes with a bare
//! integer and the three kinds cannot be mixed up:
//!
//! - [`ProviderId`]: a provider, its place in `Config::providers` (`Config::provider`).
//! - [`ChainId`]: a chain, its place in `Config::chains` (`Config::chain`).
//! - [`EntryId`]: an entry of one chain, its place in `Chain::entries` (`Chain::entry`): the
//!   chain's own providers first, then its alternative lists' entries. A plan's *slot*
//!   (`plan::Slot`) is one planned attempt; it names the entry it uses.
//!
//! Each is one byte, as the plan record writes it (the configuration's limits keep every index
//! below 256). Outside input (an index while validating the configuration, a number read back
//! from filter state) becomes an id through one checked constructor, `new` (or `parse`, which
//! reads the number and calls it); lookups by id return `Option`.

macro_rules! id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(u8);

        impl $name {
            /// Index 0 (the first provider, chain or entry).
            pub const FIRST: $name = $name(0);

            /// The id of index `index`; `None` past what one byte holds.
            #[inline]
            pub fn new(index: usize) -> Option<$name> {
                u8::try_from(index).ok().map($name)
            }

            /// Reads an id written by its `Display` (decimal); `None` for anything else.
            #[inline]
            pub fn parse(text: &str) -> Option<$name> {
                // Read as a byte (the width of every id), which is all `new` takes anyway.
                $name::new(usize::from(text.parse::<u8>().ok()?))
            }

            /// The index this id stands for.
            #[inline]
            pub fn index(self) -> usize {
                usize::from(self.0)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                self.0.fmt(f)
            }
        }

        /// Test literals: `1.into()`, `EntryId::of(1)` in constants. Not for outside input,
        /// which goes through `new`.
        #[cfg(test)]
        impl From<u8> for $name {
            fn from(index: u8) -> $name {
                $name(index)
            }
        }

        #[cfg(test)]
        impl $name {
            pub const fn of(index: u8) -> $name {
                $name(index)
            }
        }
    };
}

id!(
    /// A provider: its place in `Config::providers`.
    ProviderId
);
id!(
    /// A chain: its place in `Config::chains`.
    ChainId
);
id!(
    /// An entry of a chain: its place in `Chain::entries`.
    EntryId
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_checked_one_byte_indices_written_as_decimals() {
        assert_eq!(ProviderId::new(3).map(ProviderId::index), Some(3));
        assert_eq!(ChainId::new(255).map(|c| c.to_string()), Some("255".into()));
        assert_eq!(ChainId::new(256), None);
        assert_eq!(EntryId::parse("12"), EntryId::new(12));
        for bad in ["", "-1", "256", "1x", " 1"] {
            assert_eq!(EntryId::parse(bad), None, "{bad:?}");
        }
    }
}
