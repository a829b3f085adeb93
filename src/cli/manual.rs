//! The manual and its companions, generated from the tables the program itself uses: the
//! argument table (`args::COMMANDS`, `args::OPTIONS`) gives mesh-host(8) and the bash, zsh and
//! fish completions; the declaration's and the config's field tables give mesh-host.json(5),
//! mesh-host-config(5) and the two JSON Schemas. Only `cargo run --example gen-docs` and the tests
//! call this, so none of it is in the shipped binary.

use serde_json::{json, Map, Value};

use super::args::{self, CommandDoc, Operand, OptionDoc, COMMANDS, OPTIONS};
use crate::model::config::KEYS;
use crate::model::declaration::FIELDS;
use crate::model::fields::{FieldDoc, FieldType};
use crate::model::spec::{KindDoc, DOCS};

const VERSION: &str = env!("CARGO_PKG_VERSION");

/// Every generated file: its path under `share/` (the repository's copy) and its text.
pub fn files() -> Vec<(&'static str, String)> {
    vec![
        ("man/mesh-host.8", man_host()),
        ("man/mesh-host.json.5", man_declaration()),
        ("man/mesh-host-config.5", man_config()),
        ("completions/mesh-host.bash", bash()),
        ("completions/_mesh-host", zsh()),
        ("completions/mesh-host.fish", fish()),
        (
            "schema/declaration.schema.json",
            pretty(&declaration_schema()),
        ),
        ("schema/config.schema.json", pretty(&config_schema())),
    ]
}

const GENERATED: &str = "generated from mesh-host's tables by `cargo run --example gen-docs`";

fn pretty(value: &Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default() + "\n"
}

/// Text made safe for roff: backslashes escaped, and a line never starting with a control
/// character.
fn roff(text: &str) -> String {
    let text = text.replace('\\', "\\e");
    match text.chars().next() {
        Some('.') | Some('\'') => format!("\\&{text}"),
        _ => text,
    }
}

/// An option or command word in bold, its hyphens as minus signs (what a person types).
fn bold(word: &str) -> String {
    format!("\\fB{}\\fR", word.replace('-', "\\-"))
}

/// A usage line: options and words as typed in bold, placeholders (upper case) in italics.
fn synopsis(text: &str) -> String {
    text.split(' ')
        .map(|word| {
            let bare = word.trim_matches(|c| "[].".contains(c));
            let styled = if bare.starts_with('-') || bare.chars().all(|c| c.is_ascii_lowercase()) {
                bold(bare)
            } else {
                format!("\\fI{}\\fR", roff(bare))
            };
            word.replacen(bare, &styled, 1)
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn header(name: &str, section: u8, title: &str) -> String {
    format!(
        ".\\\" {name}({section}): {GENERATED}\n.TH {} {section} \"\" \"mesh-host {VERSION}\" \"{title}\"\n",
        name.to_uppercase()
    )
}

fn option_item(out: &mut String, o: &OptionDoc) {
    let short = o.short.map(|c| format!("{}, ", bold(&format!("-{c}"))));
    let value = o.value.map(|v| format!(" \\fI{}\\fR", roff(v)));
    out.push_str(&format!(
        ".TP\n{}{}{}\n{}\n",
        short.unwrap_or_default(),
        bold(&format!("--{}", o.long)),
        value.unwrap_or_default(),
        roff(o.about)
    ));
}

/// mesh-host(8): the commands, the options, exit codes, files.
pub fn man_host() -> String {
    let mut out = header("mesh-host", 8, "System Administration");
    out.push_str(".SH NAME\nmesh-host \\- converges this machine to a declaration\n");
    out.push_str(
        ".SH SYNOPSIS\n\\fBmesh-host\\fR [\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR]\n",
    );
    out.push_str(&format!(
        ".SH DESCRIPTION\nmesh-host is the node agent of a self-hosted fleet: it holds an Arch \
         Linux machine to a declaration (see \\fBmesh-host.json\\fR(5)) of {}. Every run \
         validates the whole declaration, takes the store's lock, observes, plans, applies and \
         records, kind by kind. As a service (\\fBmesh-host run\\fR, the unit \
         mesh-host.service) it holds one TLS link to a control plane, which sends declarations \
         and receives reports. Its own config is \\fBmesh-host-config\\fR(5).\n",
        crate::model::spec::ABOUT.join(", ")
    ));
    out.push_str(".SH COMMANDS\n");
    for c in COMMANDS {
        out.push_str(&format!(
            ".TP\n{} {}\n{}\n",
            bold(c.name),
            synopsis(c.usage),
            roff(c.about)
        ));
        let own: Vec<&OptionDoc> = OPTIONS
            .iter()
            .filter(|o| o.commands.contains(&c.name))
            .collect();
        if !own.is_empty() {
            out.push_str(".RS\n");
            for o in own {
                option_item(&mut out, o);
            }
            out.push_str(".RE\n");
        }
    }
    out.push_str(
        ".SH OPTIONS\nOptions go anywhere on the line. An option without a value refuses one \
         (\\fB\\-\\-json=false\\fR is an error). Paths may be any bytes.\n",
    );
    for o in OPTIONS.iter().filter(|o| o.commands.is_empty()) {
        option_item(&mut out, o);
    }
    out.push_str(".SH EXIT STATUS\n");
    for (code, meaning) in args::EXIT_CODES {
        out.push_str(&format!(".TP\n{code}\n{}\n", roff(meaning)));
    }
    out.push_str(
        ".SH ENVIRONMENT\n.TP\nRUST_LOG\nLogs go to standard error; \\fBRUST_LOG=debug\\fR shows \
         every command the host runs.\n",
    );
    out.push_str(
        ".SH FILES\n\
         .TP\n/etc/mesh-host/config.json\nThe config, \\fBmesh-host-config\\fR(5).\n\
         .TP\n/etc/mesh-host/join.json, ca.pem, secret\nWhat \\fBmesh-host join\\fR writes: the \
         control plane's section, its pinned CA and the node's secret (0600).\n\
         .TP\n/var/lib/mesh-host\nThe store (0700): the declaration in force and its \
         generations, the ledger of what the host owns, backups of the originals it replaced, \
         the runs, the outbox of reports.\n\
         .TP\n/usr/share/mesh-host/declaration.schema.json, config.schema.json\nJSON Schemas for \
         editors.\n\
         .TP\n/usr/share/doc/mesh-host/\nREADME.md, INSTALL and docs/*.md: the whole reference.\n",
    );
    out.push_str(
        ".SH SEE ALSO\n\\fBmesh-host.json\\fR(5), \\fBmesh-host-config\\fR(5), \\fBpacman\\fR(8), \
         \\fBsystemctl\\fR(1), \\fBpodman\\fR(1)\n",
    );
    out
}

fn field_items(out: &mut String, fields: &[FieldDoc], prefix: &str) {
    for f in fields {
        let default = match f.default {
            Some(d) => format!("default: {d}"),
            None => "required".to_string(),
        };
        out.push_str(&format!(
            ".TP\n\\fB{}{}\\fR ({}; {})\n{}\n",
            prefix,
            roff(f.name),
            roff(&f.ty.words()),
            roff(&default),
            roff(f.about)
        ));
        if let FieldType::Object(inner) = &f.ty {
            out.push_str(".RS\n");
            field_items(out, inner, &format!("{}.", f.name));
            out.push_str(".RE\n");
        }
    }
}

/// mesh-host.json(5): every field of the declaration, its type and default, kind by kind.
pub fn man_declaration() -> String {
    let mut out = header("mesh-host.json", 5, "File Formats");
    out.push_str(".SH NAME\nmesh-host.json \\- the declaration mesh-host holds a machine to\n");
    out.push_str(
        ".SH DESCRIPTION\nA declaration is one JSON object: the desired state of one machine. \
         Each kind's section maps a resource's key to its fields. Unknown fields and duplicate \
         keys are errors; the whole declaration is checked before anything is applied, and \
         every problem is reported with where it is. A resource the declaration no longer \
         names is released: removed if the host created it, put back if it adopted it. \
         /usr/share/doc/mesh-host/declaration.md is the full reference (secrets, what is \
         refused and why, signed envelopes, generations); \
         /usr/share/mesh-host/declaration.schema.json is its JSON Schema.\n",
    );
    out.push_str(".SH TOP LEVEL\n");
    field_items(&mut out, FIELDS, "");
    for kind in DOCS {
        out.push_str(&format!(
            ".TP\n\\fB{}\\fR (object; default: none)\nThe {}: key -> resource, below.\n",
            kind.name,
            roff(kind.about)
        ));
    }
    for kind in DOCS {
        out.push_str(&format!(".SH {}\n", kind.name.to_uppercase()));
        out.push_str(&format!(
            "Keys: {}. Each {} is an object of:\n",
            roff(kind.key),
            singular(kind.name)
        ));
        field_items(&mut out, kind.fields, "");
    }
    out.push_str(&format!(
        ".SH EXAMPLE\n.nf\n{}\n.fi\n",
        roff(
            r#"{
  "$schema": "/usr/share/mesh-host/declaration.schema.json",
  "schema": 1,
  "revision": 42,
  "packages": { "nginx": {}, "telnet": { "state": "absent" } },
  "files": { "/etc/nginx/nginx.conf": { "content": "...", "mode": "0644" } },
  "units": { "nginx.service": { "enabled": true, "active": true,
                                "reload_on": ["/etc/nginx/nginx.conf"] } },
  "containers": { "web": { "image": "localhost/web:1", "ports": ["127.0.0.1:8080:80"] } }
}"#
        )
        .replace('\n', "\n\\&")
    ));
    out.push_str(".SH SEE ALSO\n\\fBmesh-host\\fR(8), \\fBmesh-host-config\\fR(5)\n");
    out
}

/// mesh-host-config(5): every key of the config, its type and default.
pub fn man_config() -> String {
    let mut out = header("mesh-host-config", 5, "File Formats");
    out.push_str(".SH NAME\nmesh-host-config \\- the config of mesh-host\n");
    out.push_str(
        ".SH DESCRIPTION\n/etc/mesh-host/config.json (or \\fB\\-\\-config\\fR \\fIFILE\\fR) is one \
         JSON object; every key is optional and unknown keys are errors. A missing file at the \
         default path means every default. \\fBmesh-host join\\fR writes control_plane (and \
         trusted_keys, with \\fB\\-\\-trust\\-key\\fR) to join.json beside it, which is read with \
         it; a key may be in one of the two files only. \\fBsystemctl reload mesh-host\\fR makes \
         the service read them again (a bad config keeps the previous one). \
         /usr/share/mesh-host/config.schema.json is its JSON Schema.\n.SH KEYS\n",
    );
    field_items(&mut out, KEYS, "");
    out.push_str(".SH SEE ALSO\n\\fBmesh-host\\fR(8), \\fBmesh-host.json\\fR(5)\n");
    out
}

fn singular(kind: &str) -> &str {
    kind.strip_suffix('s').unwrap_or(kind)
}

/// The first clause of a description, for a completion's one-line help.
fn summary(about: &str) -> String {
    let end = about.find(['.', ';', ':', '(']).unwrap_or(about.len());
    about[..end].trim().to_string()
}

/// The options a command takes: its own, then the global ones.
fn options_of(command: &CommandDoc) -> Vec<&'static OptionDoc> {
    OPTIONS
        .iter()
        .filter(|o| o.commands.contains(&command.name))
        .chain(OPTIONS.iter().filter(|o| o.commands.is_empty()))
        .collect()
}

fn value_is_dir(o: &OptionDoc) -> bool {
    o.value == Some("DIR")
}

fn value_is_file(o: &OptionDoc) -> bool {
    o.value == Some("FILE")
}

fn words(options: &[&OptionDoc]) -> String {
    let mut words = Vec::new();
    for o in options {
        words.extend(o.short.map(|c| format!("-{c}")));
        words.push(format!("--{}", o.long));
    }
    words.join(" ")
}

fn command_names() -> String {
    COMMANDS
        .iter()
        .map(|c| c.name)
        .collect::<Vec<_>>()
        .join(" ")
}

/// bash: commands, each command's options, and files, directories or commands as values.
pub fn bash() -> String {
    let mut out = format!("# bash completion for mesh-host, {GENERATED}\n");
    let longs = |pick: fn(&OptionDoc) -> bool| {
        OPTIONS
            .iter()
            .filter(|o| pick(o))
            .map(|o| format!("--{}", o.long))
            .collect::<Vec<_>>()
            .join("|")
    };
    let dirs = longs(value_is_dir);
    let files = longs(value_is_file);
    let other = longs(|o| o.value.is_some() && !value_is_dir(o) && !value_is_file(o));
    out.push_str(&format!(
        "_mesh_host() {{
    local cur=${{COMP_WORDS[COMP_CWORD]}} prev=${{COMP_WORDS[COMP_CWORD-1]}}
    local commands=\"{}\"
    case $prev in
        {dirs}) compopt -o filenames; COMPREPLY=($(compgen -d -- \"$cur\")); return ;;
        {files}) compopt -o filenames; COMPREPLY=($(compgen -f -- \"$cur\")); return ;;
        {other}) return ;;
    esac
    local command= word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${{COMP_WORDS[i]}}
        case $word in
            {dirs}|{files}|{other}) ((i++)) ;;
            -*) ;;
            *) command=$word; break ;;
        esac
    done
    local options
    case $command in\n",
        command_names()
    ));
    for c in COMMANDS {
        out.push_str(&format!(
            "        {}) options=\"{}\" ;;\n",
            c.name,
            words(&options_of(c))
        ));
    }
    let global: Vec<&OptionDoc> = OPTIONS.iter().filter(|o| o.commands.is_empty()).collect();
    out.push_str(&format!(
        "        *) options=\"{}\" ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W \"$options\" -- \"$cur\"))
    elif [[ -z $command ]]; then
        COMPREPLY=($(compgen -W \"$commands\" -- \"$cur\"))
    else
        case $command in\n",
        words(&global)
    ));
    let with = |operand: Operand| commands_taking(operand, "|");
    out.push_str(&format!(
        "            {}) compopt -o filenames; COMPREPLY=($(compgen -f -- \"$cur\")) ;;
            {}) COMPREPLY=($(compgen -W \"$commands\" -- \"$cur\")) ;;
        esac
    fi
}}
complete -F _mesh_host mesh-host\n",
        with(Operand::File),
        with(Operand::Command)
    ));
    out
}

/// Text for a zsh `[description]` inside single quotes.
fn zsh_text(text: &str) -> String {
    summary(text)
        .replace('\'', "'\\''")
        .replace('[', "\\[")
        .replace(']', "\\]")
        .replace(':', "\\:")
}

fn zsh_option(o: &OptionDoc) -> String {
    let action = match o.value {
        None => String::new(),
        Some(v) if v == "DIR" => format!(":{v}:_files -/"),
        Some(v) if v == "FILE" => format!(":{v}:_files"),
        Some(v) => format!(":{v}: "),
    };
    let about = zsh_text(o.about);
    let repeat = if o.long == "trust-key" { "*" } else { "" };
    match o.short {
        Some(c) => format!(
            "'(-{c} --{long})'{{-{c},--{long}}}'[{about}]{action}'",
            long = o.long
        ),
        None => format!("'{repeat}--{}[{about}]{action}'", o.long),
    }
}

/// zsh: `_arguments` for each command, `_describe` of the commands.
pub fn zsh() -> String {
    let mut out = format!("#compdef mesh-host\n# zsh completion for mesh-host, {GENERATED}\n\n");
    out.push_str("_mesh-host() {\n  local curcontext=$curcontext state line\n  local -a commands global\n  commands=(\n");
    for c in COMMANDS {
        out.push_str(&format!("    '{}:{}'\n", c.name, zsh_text(c.about)));
    }
    out.push_str("  )\n  global=(\n");
    for o in OPTIONS.iter().filter(|o| o.commands.is_empty()) {
        out.push_str(&format!("    {}\n", zsh_option(o)));
    }
    out.push_str(
        "  )\n  _arguments -C $global '1:command:->command' '*::argument:->argument'\n  \
         case $state in\n    command) _describe -t commands 'mesh-host command' commands ;;\n    \
         argument)\n      case $line[1] in\n",
    );
    for c in COMMANDS {
        let mut specs: Vec<String> = OPTIONS
            .iter()
            .filter(|o| o.commands.contains(&c.name))
            .map(zsh_option)
            .collect();
        specs.push("$global".into());
        match c.operand {
            Operand::File => specs.push("'1:FILE:_files'".into()),
            Operand::Pid => specs.push("'1::PID:_pids'".into()),
            Operand::Command => specs.push("'1::COMMAND:(($commands))'".into()),
            Operand::None => {}
        }
        out.push_str(&format!(
            "        {}) _arguments {} ;;\n",
            c.name,
            specs.join(" ")
        ));
    }
    out.push_str("      esac ;;\n  esac\n}\n\n_mesh-host \"$@\"\n");
    out
}

/// Text for fish inside single quotes.
fn fish_text(text: &str) -> String {
    summary(text).replace('\\', "\\\\").replace('\'', "\\'")
}

fn fish_option(out: &mut String, o: &OptionDoc, condition: &str) {
    let short = o.short.map(|c| format!(" -s {c}")).unwrap_or_default();
    let value = match o.value {
        None => "",
        Some("DIR") => " -x -a '(__fish_complete_directories)'",
        Some("FILE") => " -r -F",
        Some(_) => " -x",
    };
    out.push_str(&format!(
        "complete -c mesh-host{condition}{short} -l {}{value} -d '{}'\n",
        o.long,
        fish_text(o.about)
    ));
}

/// fish: the commands until one is given, then its options and operands.
pub fn fish() -> String {
    let names = command_names();
    let mut out = format!("# fish completion for mesh-host, {GENERATED}\n");
    out.push_str("complete -c mesh-host -f\n");
    for c in COMMANDS {
        out.push_str(&format!(
            "complete -c mesh-host -n 'not __fish_seen_subcommand_from {names}' -a {} -d '{}'\n",
            c.name,
            fish_text(c.about)
        ));
    }
    for o in OPTIONS.iter().filter(|o| o.commands.is_empty()) {
        fish_option(&mut out, o, "");
    }
    for o in OPTIONS.iter().filter(|o| !o.commands.is_empty()) {
        let condition = format!(" -n '__fish_seen_subcommand_from {}'", o.commands.join(" "));
        fish_option(&mut out, o, &condition);
    }
    let with = |operand: Operand| commands_taking(operand, " ");
    out.push_str(&format!(
        "complete -c mesh-host -n '__fish_seen_subcommand_from {}' -F\n",
        with(Operand::File)
    ));
    out.push_str(&format!(
        "complete -c mesh-host -n '__fish_seen_subcommand_from {}' -x -a '{names}'\n",
        with(Operand::Command)
    ));
    out.push_str(&format!(
        "complete -c mesh-host -n '__fish_seen_subcommand_from {}' -x -a '(__fish_complete_pids)'\n",
        with(Operand::Pid)
    ));
    out
}

fn field_schema(f: &FieldDoc) -> Value {
    let mut schema = match &f.ty {
        FieldType::String => json!({"type": "string"}),
        FieldType::Bool => json!({"type": "boolean"}),
        FieldType::Integer(min) => json!({"type": "integer", "minimum": min}),
        FieldType::Const(n) => json!({"const": n}),
        FieldType::OneOf(words) => json!({"enum": words}),
        FieldType::Strings => json!({"type": "array", "items": {"type": "string"}}),
        FieldType::StringMap => {
            json!({"type": "object", "additionalProperties": {"type": "string"}})
        }
        FieldType::Object(fields) => object_schema(fields),
    };
    let default = f
        .default
        .map(|d| format!(" Default: {d}."))
        .unwrap_or_default();
    schema["description"] = Value::String(format!("{}{default}", f.about));
    schema
}

/// An object of exactly `fields`; those without a default are required.
fn object_schema(fields: &[FieldDoc]) -> Value {
    let mut properties = Map::new();
    for f in fields {
        properties.insert(f.name.to_string(), field_schema(f));
    }
    let required: Vec<&str> = fields
        .iter()
        .filter(|f| f.default.is_none())
        .map(|f| f.name)
        .collect();
    let mut schema = json!({
        "type": "object",
        "properties": properties,
        "additionalProperties": false,
    });
    if !required.is_empty() {
        schema["required"] = json!(required);
    }
    schema
}

/// A resource of `kind`: its fields, and what a present one needs (`KindSpec::REQUIRED`).
fn resource_schema(kind: &KindDoc) -> Value {
    let mut schema = object_schema(kind.fields);
    schema["description"] = Value::String(format!("A resource of {}.", kind.about));
    if !kind.required.is_empty() {
        let groups: Vec<Value> = kind
            .required
            .iter()
            .map(|group| {
                json!({"anyOf": group.iter().map(|f| json!({"required": [f]})).collect::<Vec<_>>()})
            })
            .collect();
        schema["if"] = json!({"properties": {"state": {"const": "absent"}}, "required": ["state"]});
        schema["else"] = json!({"allOf": groups});
    }
    schema
}

/// The declaration's JSON Schema (draft 2020-12): the shape `check` requires.
pub fn declaration_schema() -> Value {
    let mut schema = object_schema(FIELDS);
    let mut defs = Map::new();
    for kind in DOCS {
        defs.insert(singular(kind.name).to_string(), resource_schema(kind));
        schema["properties"][kind.name] = json!({
            "type": "object",
            "description": format!("The {}: {} -> resource.", kind.about, kind.key),
            "additionalProperties": {"$ref": format!("#/$defs/{}", singular(kind.name))},
        });
    }
    let mut top = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "file:///usr/share/mesh-host/declaration.schema.json",
        "title": "mesh-host declaration",
        "description": format!("A declaration, schema 1 (mesh-host.json(5)); {GENERATED}."),
    });
    for (k, v) in schema.as_object().into_iter().flatten() {
        top[k] = v.clone();
    }
    top["$defs"] = Value::Object(defs);
    top
}

/// The config's JSON Schema (draft 2020-12).
pub fn config_schema() -> Value {
    let mut top = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": "file:///usr/share/mesh-host/config.schema.json",
        "title": "mesh-host config",
        "description": format!("/etc/mesh-host/config.json (mesh-host-config(5)); {GENERATED}."),
    });
    for (k, v) in object_schema(KEYS).as_object().into_iter().flatten() {
        top[k] = v.clone();
    }
    top
}

/// The names of the commands whose operand is `operand`, joined by `separator` (a shell's case
/// pattern or word list).
fn commands_taking(operand: Operand, separator: &str) -> String {
    COMMANDS
        .iter()
        .filter(|c| c.operand == operand)
        .map(|c| c.name)
        .collect::<Vec<_>>()
        .join(separator)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::config::Config;
    use crate::model::declaration::tests::problems;

    /// The names the config's parser knows at `path` (a key of the top level, or of a section),
    /// from the reader's refusal of an unknown one.
    fn config_keys(section: Option<&str>) -> Vec<String> {
        let text = match section {
            None => r#"{"zz-unknown": 1}"#.to_string(),
            Some(s) => format!(r#"{{"{s}": {{"zz-unknown": 1}}}}"#),
        };
        let err = Config::parse(&text, None).unwrap_err();
        let (_, known) = err.split_once("(known fields: ").expect(&err);
        let known = known.strip_suffix(')').expect(&err);
        let mut keys: Vec<String> = known.split(", ").map(String::from).collect();
        keys.sort();
        keys
    }

    /// The fields the declaration's parser knows in `json`'s object holding `zz-unknown`.
    fn declaration_fields(json: &str) -> Vec<String> {
        let found = problems(json);
        let message = found
            .iter()
            .find(|p| p.contains("\"zz-unknown\""))
            .unwrap_or_else(|| panic!("{json}: {found:?}"));
        let (_, known) = message.split_once("known fields: ").expect(message);
        let mut fields: Vec<String> = known
            .trim_end_matches(')')
            .split(", ")
            .map(String::from)
            .collect();
        fields.sort();
        fields
    }

    fn names(fields: &[FieldDoc]) -> Vec<String> {
        let mut names: Vec<String> = fields.iter().map(|f| f.name.to_string()).collect();
        names.sort();
        names
    }

    fn sub_fields(name: &str) -> &'static [FieldDoc] {
        match KEYS.iter().find(|k| k.name == name).map(|k| &k.ty) {
            Some(FieldType::Object(fields)) => fields,
            _ => panic!("{name} is not a section"),
        }
    }

    /// Every key `fields` names is in the manual `man` (bold) and in `schema`'s properties.
    fn documented(fields: &[FieldDoc], man: &str, schema: &Value, at: &str) {
        for f in fields {
            let bold = format!("\\fB{}{}\\fR", at, f.name);
            assert!(man.contains(&bold), "{bold} is not in the manual");
            let properties = &schema["properties"][f.name];
            assert!(properties.is_object(), "{} is not in the schema", f.name);
            if let FieldType::Object(inner) = &f.ty {
                documented(inner, man, properties, &format!("{}.", f.name));
            }
        }
    }

    #[test]
    fn every_config_key_the_parser_knows_is_in_the_table_the_manual_and_the_schema() {
        assert_eq!(config_keys(None), names(KEYS));
        for section in ["control_plane", "pacman", "systemctl", "podman"] {
            assert_eq!(config_keys(Some(section)), names(sub_fields(section)));
        }
        documented(KEYS, &man_config(), &config_schema(), "");
    }

    #[test]
    fn every_declaration_field_the_parser_knows_is_in_the_table_the_manual_and_the_schema() {
        let mut top = names(FIELDS);
        top.extend(DOCS.iter().map(|k| k.name.to_string()));
        top.sort();
        assert_eq!(declaration_fields(r#"{"schema": 1, "zz-unknown": 1}"#), top);
        let keys = [
            ("packages", "nginx"),
            ("files", "/etc/x"),
            ("units", "x.service"),
            ("containers", "web"),
        ];
        assert_eq!(keys.len(), DOCS.len());
        let man = man_declaration();
        let schema = declaration_schema();
        documented(FIELDS, &man, &schema, "");
        for kind in DOCS {
            let (_, key) = keys.iter().find(|(k, _)| *k == kind.name).expect(kind.name);
            let json = format!(
                r#"{{"schema": 1, "{}": {{"{key}": {{"zz-unknown": 1}}}}}}"#,
                kind.name
            );
            assert_eq!(
                declaration_fields(&json),
                names(kind.fields),
                "{}",
                kind.name
            );
            assert!(man.contains(&format!(".SH {}\n", kind.name.to_uppercase())));
            let section = man
                .split(&format!(".SH {}\n", kind.name.to_uppercase()))
                .nth(1)
                .and_then(|s| s.split("\n.SH ").next())
                .expect(kind.name);
            let def = &schema["$defs"][singular(kind.name)];
            documented(kind.fields, section, def, "");
        }
    }

    #[test]
    fn every_command_and_option_is_in_the_manual_and_each_completion() {
        let (man, bash, zsh, fish) = (man_host(), bash(), zsh(), fish());
        for c in COMMANDS {
            assert!(
                man.contains(&format!(".TP\n\\fB{}\\fR", c.name)),
                "{}",
                c.name
            );
            assert!(
                bash.contains(&format!("        {}) options=", c.name)),
                "{}",
                c.name
            );
            assert!(zsh.contains(&format!("    '{}:", c.name)), "{}", c.name);
            assert!(fish.contains(&format!(" -a {} -d", c.name)), "{}", c.name);
        }
        for o in OPTIONS {
            let long = format!("--{}", o.long);
            assert!(man.contains(&bold(&long)), "{long}");
            assert!(bash.contains(&long), "{long}");
            assert!(zsh.contains(&long), "{long}");
            assert!(fish.contains(&format!(" -l {}", o.long)), "{long}");
            if let Some(c) = o.short {
                assert!(man.contains(&bold(&format!("-{c}"))), "-{c}");
                assert!(bash.contains(&format!(" -{c} ")), "-{c}");
                assert!(zsh.contains(&format!("-{c},")), "-{c}");
                assert!(fish.contains(&format!(" -s {c}")), "-{c}");
            }
            // Each command the option is for lists it in its completions.
            for c in o.commands {
                let line = bash
                    .lines()
                    .find(|l| l.trim_start().starts_with(&format!("{c}) options=")))
                    .expect(c);
                assert!(line.contains(&long), "{c}: {long}");
            }
        }
        for (code, _) in args::EXIT_CODES {
            assert!(man.contains(&format!(".TP\n{code}\n")), "exit {code}");
        }
    }

    #[test]
    fn roff_text_never_starts_a_request() {
        assert_eq!(roff(".x"), "\\&.x");
        assert_eq!(roff("'x"), "\\&'x");
        assert_eq!(roff("a\\b"), "a\\eb");
        assert_eq!(
            synopsis("[--to REVISION] FILE"),
            "[\\fB\\-\\-to\\fR \\fIREVISION\\fR] \\fIFILE\\fR"
        );
    }
}
