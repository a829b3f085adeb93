//! Users and groups of the target machine, read from its own `/etc/passwd` and `/etc/group` (under
//! `--root`, the mounted root's), so owners resolve as they will on that machine, not this one.
//! They are read through the same no-symlink walk as target files (`fsutil::read_below`): a link
//! in a mounted disk never leads onto the rescue system's own tables.

use std::collections::BTreeMap;
use std::path::Path;

use crate::os::fsutil;

/// Far more than any real table; a larger file is refused rather than read into memory.
const MAX_TABLE_BYTES: u64 = 64 << 20;

/// A declared owner or group: a name, or a numeric id taken as it is.
/// `(uid_t)-1`: to `chown` it means "leave as it is", so it is no one's id, never declared.
const UNCHANGED: u32 = u32::MAX;

fn unchanged(text: &str) -> String {
    format!("{text:?} is out of range for an id: {UNCHANGED} is (uid_t)-1, which chown takes for \"leave it unchanged\"")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Account {
    Name(String),
    Id(u32),
}

impl Account {
    pub fn parse(text: &str) -> Result<Account, String> {
        if text.is_empty() {
            return Err("is empty".into());
        }
        if text.bytes().all(|b| b.is_ascii_digit()) {
            return match text.parse() {
                Ok(UNCHANGED) => Err(unchanged(text)),
                Ok(id) => Ok(Account::Id(id)),
                Err(_) => Err(format!("{text:?} is out of range for an id")),
            };
        }
        let valid = text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b'$'))
            && !text.starts_with('-');
        if !valid || text.len() > 256 {
            return Err(format!("{text:?} is not a valid user or group name"));
        }
        Ok(Account::Name(text.to_string()))
    }

    pub fn display(&self) -> String {
        match self {
            Account::Name(n) => n.clone(),
            Account::Id(i) => i.to_string(),
        }
    }
}

/// Name -> id tables of one machine; a table that could not be read keeps why, so names fail
/// with that reason while numeric ids still work.
#[derive(Debug)]
pub struct Accounts {
    users: Result<BTreeMap<String, u32>, String>,
    groups: Result<BTreeMap<String, u32>, String>,
}

impl Accounts {
    /// Reads `root`'s tables; a missing file is an empty table (numeric ids still work).
    pub fn read(root: &Path) -> Accounts {
        let read = |name: &str| -> Result<BTreeMap<String, u32>, String> {
            let path = Path::new("/etc").join(name);
            let shown = |e: &dyn std::fmt::Display| {
                format!("the target's {} cannot be read: {e}", path.display())
            };
            match fsutil::read_below(root, &path, MAX_TABLE_BYTES) {
                Ok(Some((_, bytes))) => Ok(parse_table(&String::from_utf8_lossy(&bytes))),
                Ok(None) => Ok(BTreeMap::new()),
                Err(e) => Err(shown(&e)),
            }
        };
        Accounts {
            users: read("passwd"),
            groups: read("group"),
        }
    }

    pub fn uid(&self, account: &Account) -> Result<u32, String> {
        resolve(account, &self.users, "user", "/etc/passwd")
    }

    pub fn gid(&self, account: &Account) -> Result<u32, String> {
        resolve(account, &self.groups, "group", "/etc/group")
    }
}

fn resolve(
    account: &Account,
    table: &Result<BTreeMap<String, u32>, String>,
    what: &str,
    file: &str,
) -> Result<u32, String> {
    match account {
        Account::Id(id) => Ok(*id),
        Account::Name(name) => match table
            .as_ref()
            .map_err(|e| format!("{what} {name:?} cannot be looked up: {e}"))?
            .get(name)
        {
            Some(&UNCHANGED) => Err(format!(
                "{what} {name:?} in the target's {file}: {}",
                unchanged(&UNCHANGED.to_string())
            )),
            Some(id) => Ok(*id),
            None => Err(format!(
                "{what} {name:?} does not exist in the target's {file}"
            )),
        },
    }
}

/// `name:x:id:...` lines, as both passwd and group have them.
fn parse_table(text: &str) -> BTreeMap<String, u32> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let id = fields.nth(1)?.parse().ok()?;
            (!name.is_empty() && !name.starts_with('#')).then(|| (name.to_string(), id))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tables_and_resolves() {
        let accounts = Accounts {
            users: Ok(parse_table(
                "root:x:0:0:root:/root:/bin/sh\nhttp:x:33:33::/srv/http:/usr/bin/nologin\nbroken\n",
            )),
            groups: Ok(parse_table("root:x:0:\nhttp:x:33:\n")),
        };
        assert_eq!(accounts.uid(&Account::parse("http").unwrap()), Ok(33));
        assert_eq!(accounts.uid(&Account::parse("1234").unwrap()), Ok(1234));
        assert_eq!(accounts.gid(&Account::parse("root").unwrap()), Ok(0));
        // (uid_t)-1 is chown's "unchanged": refused as a number and as a name's id.
        assert_eq!(
            Account::parse("4294967294").unwrap(),
            Account::Id(4294967294)
        );
        let refused = Account::parse("4294967295").unwrap_err();
        assert!(refused.contains("(uid_t)-1"), "{refused}");
        let minus_one = Accounts {
            users: Ok(parse_table("ghost:x:4294967295:0::/:/bin/sh\n")),
            groups: Ok(BTreeMap::new()),
        };
        let refused = minus_one
            .uid(&Account::parse("ghost").unwrap())
            .unwrap_err();
        assert!(refused.contains("(uid_t)-1"), "{refused}");
        assert!(accounts
            .uid(&Account::parse("nobody").unwrap())
            .unwrap_err()
            .contains("does not exist"));
    }

    #[test]
    fn tables_are_read_without_following_symlinks() {
        let tmp = crate::util::testutil::TempDir::new("accounts-walk");
        let root = tmp.path().join("root");
        std::fs::create_dir_all(root.join("etc")).unwrap();
        std::fs::write(root.join("etc/group"), "wheel:x:10:\n").unwrap();
        // A mounted disk whose passwd links out of it, onto the system running mesh-host.
        let outside = tmp.path().join("passwd");
        std::fs::write(&outside, "intruder:x:4242:4242::/:/bin/sh\n").unwrap();
        std::os::unix::fs::symlink(&outside, root.join("etc/passwd")).unwrap();
        let accounts = Accounts::read(&root);
        let err = accounts
            .uid(&Account::parse("intruder").unwrap())
            .unwrap_err();
        assert!(err.contains("/etc/passwd cannot be read"), "{err}");
        assert!(err.contains("is a symlink"), "{err}");
        assert_eq!(accounts.uid(&Account::parse("4242").unwrap()), Ok(4242));
        assert_eq!(accounts.gid(&Account::parse("wheel").unwrap()), Ok(10));
        // /etc itself a link out of the root: refused too.
        let linked = tmp.path().join("linked");
        std::fs::create_dir_all(&linked).unwrap();
        std::os::unix::fs::symlink(root.join("etc"), linked.join("etc")).unwrap();
        let err = Accounts::read(&linked)
            .gid(&Account::parse("wheel").unwrap())
            .unwrap_err();
        assert!(err.contains("is a symlink"), "{err}");
    }

    #[test]
    fn rejects_bad_names() {
        assert!(Account::parse("").is_err());
        assert!(Account::parse("-rf").is_err());
        assert!(Account::parse("a b").is_err());
        assert!(Account::parse("99999999999").is_err());
    }
}
