"""One Dash page a file, discovered by `create_app` (Dash Pages `pages_folder`): each module calls
`dash.register_page`, defines `layout(**query)` and its callbacks at module level (`dash.callback`).
Dash imports them itself, once per app; importing one by hand needs an app to exist first."""
