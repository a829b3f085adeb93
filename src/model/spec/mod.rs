//! The resource kinds' pure parts, one file each (name rules, spec, original, parsing,
//! self-refusal, digest: `KindSpec`), and the registry, the one list of kinds. What observing and
//! applying a kind takes is in `kinds/`, one file each beside these.

pub mod containers;
pub mod files;
mod kind;
pub mod packages;
pub mod units;

pub use kind::{KindSpec, Named, NoOriginal};

/// The one list of resource kinds, as `name: Type` (the name is the kind's key in a declaration
/// and its section of the ledger). The order is the converge order: what later kinds need comes
/// first (units start what packages installed and restart on the files written before them).
/// Every per-kind list of the host follows from it (`registry!(some_macro)` hands the list to
/// `some_macro`): here the names and what each manages, in `Declaration` its fields and parsing,
/// in the ledger its sections, in `kinds` the facts kinds leave for later ones and the converge
/// and `owned` order. Adding a kind is a file here implementing `KindSpec`, one in `kinds/`
/// implementing `Kind`, and a line here; see ARCHITECTURE.md.
macro_rules! registry {
    ($then:ident) => {
        $then! {
            packages: $crate::model::spec::packages::Packages,
            files: $crate::model::spec::files::Files,
            units: $crate::model::spec::units::Units,
            containers: $crate::model::spec::containers::Containers,
        }
    };
}
pub(crate) use registry;

/// A kind as the manual and the JSON Schema describe it (`KindSpec`'s documentation items).
pub struct KindDoc {
    pub name: &'static str,
    pub about: &'static str,
    pub key: &'static str,
    pub fields: &'static [crate::model::fields::FieldDoc],
    pub required: &'static [&'static [&'static str]],
}

macro_rules! named {
    ($($name:ident: $kind:ty,)*) => {
        /// The kinds' names, in converge order: the top-level keys a declaration may have besides
        /// its own fields.
        pub const NAMES: &[&str] = &[$(stringify!($name)),*];

        /// What each kind manages, in converge order, for the usage text.
        pub const ABOUT: &[&str] = &[$(<$kind as KindSpec>::ABOUT),*];

        /// Each kind's manual entry, in converge order: its name, what it manages, its keys, fields
        /// and required fields.
        pub const DOCS: &[KindDoc] = &[$(KindDoc {
            name: stringify!($name),
            about: <$kind as KindSpec>::ABOUT,
            key: <$kind as KindSpec>::KEY,
            fields: <$kind as KindSpec>::FIELDS,
            required: <$kind as KindSpec>::REQUIRED,
        }),*];

        $(impl Named for $kind {
            const NAME: &'static str = stringify!($name);
        })*
    };
}
registry!(named);
