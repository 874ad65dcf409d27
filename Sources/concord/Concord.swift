import ArgumentParser

/// The `concord` command-line tool.
@main
struct Concord: ParsableCommand {
    static let configuration = CommandConfiguration(
        commandName: "concord",
        abstract: "File coordination, presenters and folder sync for Linux.",
        subcommands: [Demo.self, Watch.self]
    )
}
