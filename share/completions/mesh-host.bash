# bash completion for mesh-host, generated from mesh-host's tables by `cargo run --example gen-docs`
_mesh_host() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
    local commands="check plan apply confirm rollback reconcile owned show status reload run join keygen sign help"
    case $prev in
        --state-dir|--root) compopt -o filenames; COMPREPLY=($(compgen -d -- "$cur")); return ;;
        --config|--token-file|--out|--key) compopt -o filenames; COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --confirm|--to|--control-plane|--token|--ca-hash|--trust-key) return ;;
    esac
    local command= word i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word=${COMP_WORDS[i]}
        case $word in
            --state-dir|--root|--config|--token-file|--out|--key|--confirm|--to|--control-plane|--token|--ca-hash|--trust-key) ((i++)) ;;
            -*) ;;
            *) command=$word; break ;;
        esac
    done
    local options
    case $command in
        check) options="--state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        plan) options="--detailed-exitcode --state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        apply) options="--confirm --state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        confirm) options="--state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        rollback) options="--to --force --state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        reconcile) options="--state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        owned) options="--detailed-exitcode --state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        show) options="--state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        status) options="--state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        reload) options="--state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        run) options="--state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        join) options="--force --control-plane --token-file --token --ca-hash --trust-key --state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        keygen) options="--out --state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        sign) options="--key --state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        help) options="--state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
        *) options="--state-dir --config --root --wait --json --trace-commands -q --quiet -v --verbose -h --help -V --version" ;;
    esac
    if [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$options" -- "$cur"))
    elif [[ -z $command ]]; then
        COMPREPLY=($(compgen -W "$commands" -- "$cur"))
    else
        case $command in
            check|plan|apply|sign) compopt -o filenames; COMPREPLY=($(compgen -f -- "$cur")) ;;
            help) COMPREPLY=($(compgen -W "$commands" -- "$cur")) ;;
        esac
    fi
}
complete -F _mesh_host mesh-host
