//! A declaration: the desired state of a node, version 1. Parsing is in two stages: the JSON text
//! becomes a tree of values (duplicate keys rejected), then each resource is validated by its kind
//! into the typed model the rest of the host uses. Every problem is collected, each naming where it
//! is, so a person sees them all at once; one problem means nothing is applied.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::model::config::{Identity, Limits};
use crate::model::fields::{content_secrets, secret_piece, FieldDoc, FieldType, Fields, Problems};
use crate::model::spec::files::{self};
use crate::model::spec::units::{self};
use crate::model::spec::{self, KindSpec};
use crate::util::codec;

mod stream;

pub const SCHEMA: u64 = 1;

/// Where a kind's resources are in a declaration (given by the registry).
pub trait Declared: KindSpec {
    fn desired(declaration: &Declaration) -> &BTreeMap<String, Self::Spec>;
    fn desired_mut(declaration: &mut Declaration) -> &mut BTreeMap<String, Self::Spec>;
}

/// Something done once per kind of a declaration.
trait VisitDeclared {
    type Out;
    fn visit<K: Declared>(&mut self) -> Self::Out;
}

macro_rules! declaration {
    ($($name:ident: $kind:ty,)*) => {
        /// The validated desired state: one map per kind of the registry (`spec::registry!`),
        /// keyed by each resource's identity.
        #[derive(Debug, Clone, Default)]
        pub struct Declaration {
            pub revision: Option<u64>,
            /// Unix seconds after which the control plane may no longer deliver it (the one in
            /// force is still held past it; `status` and reports say it expired).
            pub expires: Option<u64>,
            /// Install packages through a full `pacman -Syu` instead of `-S` (never a partial
            /// upgrade).
            pub packages_upgrade: bool,
            $(pub $name: BTreeMap<String, <$kind as KindSpec>::Spec>,)*
            /// sha256 of the declaration's bytes, as received.
            pub digest: String,
        }

        /// Does `visitor`'s work for every kind, in converge order.
        fn each<V: VisitDeclared>(visitor: &mut V) -> Vec<V::Out> {
            vec![$(visitor.visit::<$kind>()),*]
        }

        /// Does `visitor`'s work for the kind called `name`, if there is one.
        fn by_name<V: VisitDeclared>(name: &str, visitor: &mut V) -> Option<V::Out> {
            match name {
                $(stringify!($name) => Some(visitor.visit::<$kind>()),)*
                _ => None,
            }
        }

        $(impl Declared for $kind {
            fn desired(d: &Declaration) -> &BTreeMap<String, Self::Spec> {
                &d.$name
            }
            fn desired_mut(d: &mut Declaration) -> &mut BTreeMap<String, Self::Spec> {
                &mut d.$name
            }
        })*
    };
}
spec::registry!(declaration);

impl Declaration {
    /// How many resources it declares, of every kind.
    pub fn count(&self) -> usize {
        struct Count<'d>(&'d Declaration);
        impl VisitDeclared for Count<'_> {
            type Out = usize;
            fn visit<K: Declared>(&mut self) -> usize {
                K::desired(self.0).len()
            }
        }
        each(&mut Count(self)).into_iter().sum()
    }

    /// Whether anything in it is secret: a secret file or unit (`files::is_secret`,
    /// `units::is_secret`) or a container with an environment (every env value is secret).
    pub fn has_secrets(&self) -> bool {
        self.files.values().any(files::is_secret)
            || self.units.values().any(units::is_secret)
            || self.containers.values().any(|c| !c.env.is_empty())
    }

    /// The texts a tool's stderr is scrubbed of (`exec::redact`): each secret content's lines,
    /// and what follows each `=` or `:` in them (what a tool complaining about a line would
    /// quote), and every container env value. Pieces shorter than `exec::MIN_REDACTED`
    /// bytes are left out: scrubbing them would garble every message and hide no secret.
    pub fn secret_texts(&self) -> Vec<String> {
        let mut texts = BTreeSet::new();
        for spec in self.files.values() {
            if let files::Spec::Present(c) = spec {
                if c.is_secret() {
                    content_secrets(&c.bytes, &mut texts);
                }
            }
        }
        for spec in self.units.values().filter(|u| units::is_secret(u)) {
            content_secrets(
                spec.content.as_deref().unwrap_or_default().as_bytes(),
                &mut texts,
            );
        }
        for value in self.containers.values().flat_map(|c| c.env.values()) {
            secret_piece(value, &mut texts);
        }
        texts.into_iter().collect()
    }
}

/// What validation needs to know about the host that will apply the declaration.
pub struct Context<'a> {
    pub limits: &'a Limits,
    pub identity: &'a Identity,
}

/// The declaration's own top-level fields, for the manual and the JSON Schema (the kinds'
/// sections follow from `spec::DOCS`); `parse` is the authority.
pub const FIELDS: &[FieldDoc] = &[
    FieldDoc {
        name: "$schema",
        ty: FieldType::String,
        default: Some("none"),
        about: "Ignored: the JSON Schema an editor checks the file with \
                (/usr/share/mesh-host/declaration.schema.json).",
    },
    FieldDoc {
        name: "schema",
        ty: FieldType::Const(SCHEMA),
        default: None,
        about: "The format's version.",
    },
    FieldDoc {
        name: "revision",
        ty: FieldType::Integer(0),
        default: Some("none"),
        about: "The control plane's increasing counter, shown by status; required in a signed \
                declaration from the control plane.",
    },
    FieldDoc {
        name: "expires",
        ty: FieldType::Integer(0),
        default: Some("never"),
        about: "Unix seconds from which the control plane cannot deliver it (the one in force is \
                still held past it).",
    },
    FieldDoc {
        name: "packages_upgrade",
        ty: FieldType::Bool,
        default: Some("false"),
        about: "true: missing packages install with a full pacman -Syu --needed (the system is \
                upgraded with them); false: with pacman -S --needed.",
    },
];

/// Parses and validates a declaration. Either the whole thing is valid, or every problem is listed.
pub fn parse(bytes: &[u8], cx: &Context) -> Result<Declaration, Problems> {
    let mut problems = Problems::default();
    if bytes.len() as u64 > cx.limits.max_declaration_bytes {
        problems.push(
            "",
            format!(
                "declaration is {} bytes, more than the limit of {} bytes",
                bytes.len(),
                cx.limits.max_declaration_bytes
            ),
        );
        return Err(problems);
    }
    let top = match stream::read(bytes, cx) {
        Ok(Some(top)) => top,
        Ok(None) => {
            problems.push("", "a declaration must be a JSON object");
            return Err(problems);
        }
        Err(e) => {
            problems.push("", format!("not valid JSON: {e}"));
            return Err(problems);
        }
    };
    let mut fields = Fields::new(&top.fields, String::new(), &mut problems);
    // An editor's JSON Schema, ignored.
    fields.str("$schema");
    let schema = fields.u64("schema");
    let revision = fields.u64("revision");
    let expires = fields.u64("expires");
    let packages_upgrade = fields.bool("packages_upgrade").unwrap_or(false);
    for kind in spec::NAMES {
        fields.object(kind);
    }
    fields.finish();
    match schema {
        Some(SCHEMA) => {}
        Some(other) => problems.push(
            "schema",
            format!("{other} is not a supported schema (this host reads {SCHEMA})"),
        ),
        None if !top.fields.contains_key("schema") => {
            problems.push("schema", "missing (this host reads schema 1)")
        }
        None => {}
    }
    // Each kind's problems in the kinds' order, whatever order the JSON had them in.
    let mut found = top.problems;
    for kind in spec::NAMES {
        if let Some(mut of_kind) = found.remove(kind) {
            problems.0.append(&mut of_kind.0);
        }
    }
    let declaration = Declaration {
        revision,
        expires,
        packages_upgrade,
        digest: codec::sha256_hex(bytes),
        ..top.resources
    };
    check_references(&declaration, cx.identity, &mut problems);
    if problems.is_empty() {
        Ok(declaration)
    } else {
        Err(problems)
    }
}

/// Checks between resources: a unit's file is not declared as a file too; a unit may name the
/// package that provides it and the files it restarts or reloads on, which must be ones this
/// declaration writes.
fn check_references(d: &Declaration, identity: &Identity, problems: &mut Problems) {
    // A unit's file declared as a file too would be written by two kinds, each undoing the
    // other every run (and a unit restarted each time); one in a directory before the unit
    // directory on systemd's search path would hide the unit's own.
    for (name, _) in d.units.iter().filter(|(_, s)| s.content.is_some()) {
        for dir in &identity.unit_dirs {
            let path = dir.join(name);
            let Some(path) = path.to_str() else { continue };
            if d.files.contains_key(path) {
                problems.push(
                    format!("files[{}]", Value::String(path.to_string())),
                    format!(
                        "is where systemd reads units[{}], whose content this declaration \
                         gives: declare the unit file in one place",
                        Value::String(name.clone())
                    ),
                );
            }
        }
    }
    for (name, spec) in &d.units {
        for path in units::watched_files(spec) {
            if !matches!(d.files.get(path), Some(files::Spec::Present(_))) {
                problems.push(
                    format!("units[{}]", Value::String(name.clone())),
                    format!("restarts or reloads on {path}, which is not a file this declaration writes"),
                );
            }
        }
    }
    let present: BTreeSet<&str> = d
        .packages
        .iter()
        .filter(|(_, spec)| spec.present)
        .map(|(name, _)| name.as_str())
        .collect();
    for (name, spec) in &d.units {
        if let Some(package) = &spec.package {
            if !present.contains(package.as_str()) {
                problems.push(
                    format!("units[{}].package", Value::String(name.clone())),
                    format!("{package:?} is not a package this declaration installs"),
                );
            }
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::model::config::Config;

    /// Validates `json` with a default config and returns the problems, one string each.
    /// What a tool's stderr is scrubbed of: secret files' and units' lines and values, every
    /// env value; nothing of what is not secret, nothing shorter than `MIN_REDACTED`.
    #[test]
    fn secret_texts_are_the_secrets_lines_values_and_env_values() {
        let d = parse_with_defaults(
            r#"{"schema": 1,
                "files": {"/etc/a": {"content": "user = app\npassword: hunter22\nx=1\n", "mode": "0600"},
                          "/etc/b": {"content": "public=visible\n"},
                          "/etc/c": {"content": "private=shown\n", "mode": "0600", "secret": false}},
                "units": {"a.service": {"content": "[Service]\nEnvironment=TOKEN=unit-canary\n", "secret": true},
                          "b.service": {"content": "[Service]\nExecStart=/bin/visible\n"}},
                "containers": {"web": {"image": "img", "env": {"DB": "env-canary", "N": "1"}}}}"#,
        )
        .unwrap();
        assert!(d.has_secrets());
        assert_eq!(
            d.secret_texts(),
            [
                "Environment=TOKEN=unit-canary",
                "TOKEN=unit-canary",
                "[Service]",
                "env-canary",
                "hunter22",
                "password: hunter22",
                "unit-canary",
                "user = app",
            ]
        );
        let plain = parse_with_defaults(r#"{"schema": 1, "files": {"/etc/b": {"content": "x"}}}"#);
        assert!(!plain.unwrap().has_secrets());
    }

    pub fn problems(json: &str) -> Vec<String> {
        match parse_with_defaults(json) {
            Ok(_) => Vec::new(),
            Err(p) => p.0.iter().map(ToString::to_string).collect(),
        }
    }

    pub fn parse_with_defaults(json: &str) -> Result<Declaration, Problems> {
        let config = test_config();
        parse(
            json.as_bytes(),
            &Context {
                limits: &config.limits,
                identity: &config.identity,
            },
        )
    }

    pub fn test_config() -> Config {
        Config::parse(
            r#"{"unit_name": "agent.service", "state_dir": "/srv/mesh-store"}"#,
            None,
        )
        .expect("test config is valid")
    }

    /// Asserts that `json` is refused with exactly one problem containing each of `needles`.
    pub fn check_refused(json: &str, needles: &[&str]) {
        let found = problems(json);
        assert_eq!(
            found.len(),
            1,
            "expected one problem for {json}, got {found:#?}"
        );
        for needle in needles {
            assert!(
                found[0].contains(needle),
                "{:?} does not mention {needle:?}",
                found[0]
            );
        }
    }

    #[test]
    fn a_resource_declared_twice_is_refused_whether_or_not_it_is_valid() {
        for (first, second) in [
            (r#"{"content": "a"}"#, r#"{"content": "b"}"#),
            (r#"{"mode": "x"}"#, r#"{"content": "b"}"#),
            (r#"{"content": "a"}"#, r#"{"mode": "x"}"#),
            (r#"{"mode": "x"}"#, r#"{"mode": "y"}"#),
        ] {
            check_refused(
                &format!(r#"{{"schema": 1, "files": {{"/etc/x": {first}, "/etc/x": {second}}}}}"#),
                &["duplicate key \"/etc/x\""],
            );
        }
    }

    #[test]
    fn minimal_and_empty_declarations() {
        assert!(problems(r#"{"schema": 1}"#).is_empty());
        let d = parse_with_defaults(r#"{"schema": 1, "revision": 42}"#).unwrap();
        assert_eq!(d.revision, Some(42));
        assert_eq!(d.digest.len(), 64);
    }

    #[test]
    fn top_level_problems() {
        check_refused(r#"{}"#, &["schema: missing"]);
        check_refused(r#"{"schema": 2}"#, &["schema: 2 is not a supported schema"]);
        check_refused(
            r#"{"schema": 1, "revison": 3}"#,
            &["unknown field \"revison\""],
        );
        check_refused(
            r#"{"schema": 1, "revision": -1}"#,
            &["revision: must be a non-negative integer"],
        );
        check_refused(
            r#"{"schema": 1, "files": []}"#,
            &["files: must be an object, not an array"],
        );
        check_refused(r#"[1]"#, &["must be a JSON object"]);
        check_refused(r#"{"schema": 1"#, &["not valid JSON", "line 1"]);
        check_refused(
            r#"{"schema": 1, "schema": 1}"#,
            &["duplicate key \"schema\""],
        );
    }

    #[test]
    fn every_problem_is_reported_at_once() {
        let found = problems(
            r#"{"schema": 1,
                "files": {"etc/x": {"content": "a"}, "/etc/y": {"mode": "0999", "content": "b"}},
                "units": {"nginx": {"enabeld": true}},
                "packages": {"-Syu": {}}}"#,
        );
        assert_eq!(found.len(), 5, "{found:#?}");
        let all = found.join("\n");
        assert!(
            all.contains(r#"files["/etc/y"].mode: "0999" is not an octal mode"#),
            "{all}"
        );
        assert!(
            all.contains(r#"units["nginx"]: unknown field "enabeld""#),
            "{all}"
        );
    }

    #[test]
    fn bytes_that_are_not_text_are_refused_where_they_are() {
        let cases: [(&[u8], &str); 3] = [
            (
                b"{\"schema\": 1, \"files\": {\"/etc/a\": {\"content\": \"\xff\"}}}",
                "not valid JSON: invalid unicode code point at line 1 column 48",
            ),
            (
                b"{\"schema\": 1, \xff}",
                "not valid JSON: key must be a string at line 1 column 15",
            ),
            (
                b"{\"schema\": 1, \"schema\": 2, \"x\": \"\xff\"}",
                "not valid JSON: duplicate key \"schema\" at line 1 column 22",
            ),
        ];
        let config = test_config();
        let cx = Context {
            limits: &config.limits,
            identity: &config.identity,
        };
        for (bytes, want) in cases {
            assert_eq!(parse(bytes, &cx).unwrap_err().to_string(), want);
        }
    }

    #[test]
    fn declaration_size_limit() {
        let mut config = test_config();
        config.limits.max_declaration_bytes = 10;
        let err = parse(
            br#"{"schema": 1, "revision": 1}"#,
            &Context {
                limits: &config.limits,
                identity: &config.identity,
            },
        )
        .unwrap_err();
        assert!(err.to_string().contains("more than the limit of 10 bytes"));
    }

    #[test]
    fn unit_package_must_be_declared() {
        check_refused(
            r#"{"schema": 1, "units": {"nginx.service": {"package": "nginx"}}}"#,
            &[
                r#"units["nginx.service"].package: "nginx" is not a package this declaration installs"#,
            ],
        );
        assert!(problems(
            r#"{"schema": 1, "packages": {"nginx": {}}, "units": {"nginx.service": {"package": "nginx"}}}"#
        )
        .is_empty());
    }

    #[test]
    fn a_units_file_is_not_declared_as_a_file_too() {
        let unit = r#""units": {"x.service": {"content": "[Service]\nExecStart=/bin/true\n"}}"#;
        let found = problems(&format!(
            r#"{{"schema": 1, {unit}, "files": {{
                "/etc/systemd/system/x.service": {{"content": "a"}},
                "/etc/systemd/system.control/x.service": {{"content": "a"}}}}}}"#
        ));
        assert_eq!(found.len(), 2, "{found:#?}");
        for (problem, dir) in found.iter().zip(["system.control", "system"]) {
            let want = format!(
                r#"files["/etc/systemd/{dir}/x.service"]: is where systemd reads units["x.service"]"#
            );
            assert!(problem.contains(&want), "{problem}");
        }
        // A drop-in, or a unit a package ships, is another file.
        assert!(problems(&format!(
            r#"{{"schema": 1, {unit}, "files": {{"/etc/systemd/system/x.service.d/o.conf": {{"content": "a"}}}}}}"#
        ))
        .is_empty());
        assert!(problems(
            r#"{"schema": 1, "units": {"x.service": {"enabled": true}}, "files": {"/etc/systemd/system/x.service": {"content": "a"}}}"#
        )
        .is_empty());
    }
}
