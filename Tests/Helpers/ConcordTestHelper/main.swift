import FileCoordination
import FileWatching
import Foundation

// A helper process for Concord's multi-process tests. Each command coordinates through the real
// FileCoordinator and reports on standard output, one line per event, so the test that spawned
// it can wait for exactly what it expects.
#if canImport(Glibc)
import Glibc
#endif

func say(_ line: String) {
    FileHandle.standardOutput.write(Data((line + "\n").utf8))
}

/// Ends the process at once, as a crash does: nothing is closed or flushed.
func dieNow() -> Never {
    kill(getpid(), SIGKILL)
    fatalError("still alive after SIGKILL")
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("ConcordTestHelper: \(message)\n".utf8))
    exit(2)
}

let arguments = Array(CommandLine.arguments.dropFirst())
guard let command = arguments.first else { fail("usage: ConcordTestHelper COMMAND ...") }

switch command {
case "increment":
    // increment FILE COUNT: COUNT coordinated read-modify-write increments of a decimal counter.
    guard arguments.count == 3, let count = Int(arguments[2]) else { fail("usage: increment FILE COUNT") }
    let url = URL(fileURLWithPath: arguments[1])
    let coordinator = FileCoordinator()
    say("started")
    for _ in 0..<count {
        do {
            try coordinator.updateContentsOfItem(at: url) { data in
                let value = data.flatMap { Int(String(decoding: $0, as: UTF8.self)) } ?? 0
                return Data(String(value + 1).utf8)
            }
        } catch {
            fail("increment failed: \(error)")
        }
    }
    say("done")

case "hold":
    // hold FILE read|write: takes the lock, says "held", and keeps it until killed.
    guard arguments.count == 3 else { fail("usage: hold FILE read|write") }
    let url = URL(fileURLWithPath: arguments[1])
    let coordinator = FileCoordinator()
    let body: (URL) -> Void = { _ in
        say("held")
        while true { pause() }
    }
    do {
        if arguments[2] == "write" {
            try coordinator.coordinate(writingItemAt: url, byAccessor: body)
        } else {
            try coordinator.coordinate(readingItemAt: url, byAccessor: body)
        }
    } catch {
        fail("hold failed: \(error)")
    }

case "readers":
    // readers FILE THREADS HOLD_MICROSECONDS: a stream of overlapping coordinated readers that
    // never leaves the file unread, until killed.
    guard arguments.count == 4, let threads = Int(arguments[2]), let hold = UInt32(arguments[3]) else {
        fail("usage: readers FILE THREADS HOLD_MICROSECONDS")
    }
    let url = URL(fileURLWithPath: arguments[1])
    for _ in 0..<threads {
        Thread.detachNewThread {
            let coordinator = FileCoordinator()
            while true {
                _ = try? coordinator.coordinate(readingItemAt: url, options: .withoutChanges) { _ in usleep(hold) }
            }
        }
    }
    say("started")
    while true { pause() }

case "write":
    // write FILE TEXT: one coordinated atomic replace.
    guard arguments.count == 3 else { fail("usage: write FILE TEXT") }
    say("asking")
    do {
        try FileCoordinator().replaceContentsOfItem(
            at: URL(fileURLWithPath: arguments[1]),
            with: Data(arguments[2].utf8)
        )
        say("written")
    } catch {
        fail("write failed: \(error)")
    }

case "write-loop":
    // write-loop FILE SIZE: replaces FILE forever, alternately with SIZE bytes of "a" and of "b".
    guard arguments.count == 3, let size = Int(arguments[2]) else { fail("usage: write-loop FILE SIZE") }
    let url = URL(fileURLWithPath: arguments[1])
    let coordinator = FileCoordinator()
    let contents = [Data(repeating: UInt8(ascii: "a"), count: size), Data(repeating: UInt8(ascii: "b"), count: size)]
    var round = 0
    while true {
        do {
            try coordinator.replaceContentsOfItem(at: url, with: contents[round % 2])
        } catch {
            fail("write failed: \(error)")
        }
        round += 1
        if round == 3 { say("writing") }
    }

case "fs":
    // fs OP ARGS...: one uncoordinated file operation, as any other program would do it.
    //   append FILE TEXT | create FILE | delete PATH | move FROM TO | mkdir DIR
    guard arguments.count >= 3 else { fail("usage: fs OP ARGS...") }
    let operation = arguments[1]
    let path = arguments[2]
    do {
        switch operation {
        case "append":
            if !FileManager.default.fileExists(atPath: path) {
                _ = FileManager.default.createFile(atPath: path, contents: nil)
            }
            guard let handle = FileHandle(forWritingAtPath: path) else { fail("cannot open \(path)") }
            handle.seekToEndOfFile()
            handle.write(Data(arguments[3].utf8))
            try handle.close()
        case "create":
            // Written outside the folder and renamed in: one event for watchers of the folder, as
            // a file arriving from elsewhere. (FileManager.createFile writes a temporary file in
            // the folder itself on Linux, which watchers may see as its own creation and move.)
            let parent = URL(fileURLWithPath: path).deletingLastPathComponent().deletingLastPathComponent()
            let staging = parent.appendingPathComponent(".helper-create-\(getpid())")
            try Data("new".utf8).write(to: staging)
            try FileManager.default.moveItem(atPath: staging.path, toPath: path)
        case "delete": try FileManager.default.removeItem(atPath: path)
        case "move": try FileManager.default.moveItem(atPath: path, toPath: arguments[3])
        case "mkdir": try FileManager.default.createDirectory(atPath: path, withIntermediateDirectories: true)
        default: fail("unknown fs operation \(operation)")
        }
    } catch {
        fail("fs \(operation) failed: \(error)")
    }
    say("done")

case "editor":
    // editor vim|emacs|sed FILE TEXT: an editor's save of FILE, uncoordinated, in one burst.
    //   vim: mv FILE FILE~; write FILE; rm FILE~    emacs: mv FILE FILE~; write FILE
    //   sed: write a temporary file beside FILE, rename it over FILE (as `sed -i` does)
    guard arguments.count == 4 else { fail("usage: editor vim|emacs|sed FILE TEXT") }
    let path = arguments[2]
    let text = Data(arguments[3].utf8)
    let directory = URL(fileURLWithPath: path).deletingLastPathComponent().path
    do {
        switch arguments[1] {
        case "vim", "emacs":
            guard rename(path, path + "~") == 0 else { fail("rename \(path) failed: errno \(errno)") }
            try text.write(to: URL(fileURLWithPath: path))
            if arguments[1] == "vim" { try FileManager.default.removeItem(atPath: path + "~") }
        case "sed":
            let temporary = directory + "/sed\(getpid())"
            try text.write(to: URL(fileURLWithPath: temporary))
            guard rename(temporary, path) == 0 else { fail("rename \(temporary) failed: errno \(errno)") }
        default: fail("unknown editor \(arguments[1])")
        }
    } catch {
        fail("editor save failed: \(error)")
    }
    say("done")

case "move":
    // move FROM TO: one coordinated move.
    guard arguments.count == 3 else { fail("usage: move FROM TO") }
    do {
        try FileCoordinator().moveItem(at: URL(fileURLWithPath: arguments[1]), to: URL(fileURLWithPath: arguments[2]))
    } catch {
        fail("move failed: \(error)")
    }
    say("done")

case "watch-limit":
    // watch-limit DIR: one watch of DIR; says "watched", or "error CODE MESSAGE" (run it where the
    // watch limit is low: in a user namespace of its own, which has its own limit).
    guard arguments.count == 2 else { fail("usage: watch-limit DIR") }
    do {
        let watcher = try InotifyWatcher()
        defer { watcher.stop() }
        _ = try watcher.watch(URL(fileURLWithPath: arguments[1])) { _ in }
        say("watched")
    } catch {
        say("error \(error.code == .watchLimitReached ? "watchLimitReached" : "other") \(error.message)")
    }
case "present":
    // See PresentCommand.swift.
    runPresent(arguments)

case "version":
    // See VersionCommand.swift.
    runVersion(arguments)

case "migrate-rss":
    runMigrateRSS(arguments)

case "join-rss": runJoinRSS(arguments)

case "import-rss": runImportRSS(arguments)

case "sync-edit": runSyncEdit(arguments)

case "sync-share": runSyncShare(arguments)

case "store-insert", "store-move", "store-delete":
    // See StoreCommands.swift.
    runStoreCommand(arguments)

default:
    fail("unknown command \(command)")
}
