//! Users and groups of the target machine, read from its own `/etc/passwd` and `/etc/group` (under
//! `--root`, the mounted root's), so owners resolve as they will on that machine, not this one.

use std::collections::BTreeMap;
use std::path::Path;

/// A declared owner or group: a name, or a numeric id taken as it is.
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
            return text
                .parse()
                .map(Account::Id)
                .map_err(|_| format!("{text:?} is out of range for an id"));
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

/// Name -> id tables of one machine.
#[derive(Debug, Default)]
pub struct Accounts {
    users: BTreeMap<String, u32>,
    groups: BTreeMap<String, u32>,
}

impl Accounts {
    /// Reads `root`'s tables; a missing file is an empty table (numeric ids still work).
    pub fn read(root: &Path) -> Accounts {
        let read =
            |name: &str| std::fs::read_to_string(root.join("etc").join(name)).unwrap_or_default();
        Accounts {
            users: parse_table(&read("passwd")),
            groups: parse_table(&read("group")),
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
    table: &BTreeMap<String, u32>,
    what: &str,
    file: &str,
) -> Result<u32, String> {
    match account {
        Account::Id(id) => Ok(*id),
        Account::Name(name) => table
            .get(name)
            .copied()
            .ok_or_else(|| format!("{what} {name:?} does not exist in the target's {file}")),
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
            users: parse_table(
                "root:x:0:0:root:/root:/bin/sh\nhttp:x:33:33::/srv/http:/usr/bin/nologin\nbroken\n",
            ),
            groups: parse_table("root:x:0:\nhttp:x:33:\n"),
        };
        assert_eq!(accounts.uid(&Account::parse("http").unwrap()), Ok(33));
        assert_eq!(accounts.uid(&Account::parse("1234").unwrap()), Ok(1234));
        assert_eq!(accounts.gid(&Account::parse("root").unwrap()), Ok(0));
        assert!(accounts
            .uid(&Account::parse("nobody").unwrap())
            .unwrap_err()
            .contains("does not exist"));
    }

    #[test]
    fn rejects_bad_names() {
        assert!(Account::parse("").is_err());
        assert!(Account::parse("-rf").is_err());
        assert!(Account::parse("a b").is_err());
        assert!(Account::parse("99999999999").is_err());
    }
}
