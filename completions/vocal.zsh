#compdef vocal

_vocal_completion() {
  eval $(env _TYPER_COMPLETE_ARGS="${words[1,$CURRENT]}" _VOCAL_COMPLETE=complete_zsh vocal)
}

compdef _vocal_completion vocal
