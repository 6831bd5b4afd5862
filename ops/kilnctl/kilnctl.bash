# bash completion for kilnctl (installed as <datadir>/bash-completion/completions/kilnctl).
# The commands and each command's options are read from kilnctl itself (its command list
# and `kilnctl help COMMAND`), so this file never falls behind the binary it completes.
_kilnctl() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  local kilnctl=${COMP_WORDS[0]} command="" i
  # The command is the first word that is no option (nor --socket's value).
  for ((i = 1; i < COMP_CWORD; i++)); do
    case ${COMP_WORDS[i]} in
      --socket) ((i++)) ;;
      -*) ;;
      *) command=${COMP_WORDS[i]}; break ;;
    esac
  done
  case $prev in
    --socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --key|--manifest|-o|--output) COMPREPLY=($(compgen -f -- "$cur")); return ;;
  esac
  if [ -z "$command" ]; then
    if [[ $cur == -* ]]; then
      COMPREPLY=($(compgen -W "--json --socket --help --version" -- "$cur"))
    else
      local commands
      commands=$("$kilnctl" 2>&1 | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
      COMPREPLY=($(compgen -W "$commands" -- "$cur"))
    fi
    return
  fi
  if [[ $cur == -* ]]; then
    local options
    options=$("$kilnctl" help "$command" 2>/dev/null | grep -o -- '--[a-z][a-z0-9-]*' | sort -u)
    COMPREPLY=($(compgen -W "$options" -- "$cur"))
  elif [ "$command" = help ]; then
    local commands
    commands=$("$kilnctl" 2>&1 | awk '/^commands:/ {on = 1; next} on && /^  [a-z]/ {print $1}')
    COMPREPLY=($(compgen -W "$commands" -- "$cur"))
  else
    # Right after a command that has subcommands (source add, fleet prune, trust ls): those.
    local subcommands=""
    if ((i + 1 == COMP_CWORD)); then
      subcommands=$("$kilnctl" help "$command" 2>/dev/null |
        awk '/^[Ss]ubcommands:/ {on = 1; next} on && /^  [a-z]/ {print $1} on && /^$/ {on = 0}')
    fi
    if [ -n "$subcommands" ]; then
      COMPREPLY=($(compgen -W "$subcommands" -- "$cur"))
    else
      COMPREPLY=($(compgen -f -- "$cur"))
    fi
  fi
}
complete -F _kilnctl kilnctl
