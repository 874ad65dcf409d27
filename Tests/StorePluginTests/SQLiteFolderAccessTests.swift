import ConcordTestSupport
import Foundation
import Persistence
import StoreConformance
import Testing

@testable import SQLiteStore

// Errors say what to do: an SQLite store in a folder it cannot write fails with notWritable,
// naming the folder and the errno (EROFS on a read-only file system, EACCES without
// permission), not SQLite's "unable to open database file".
#if canImport(Glibc)
import Glibc
#endif

@Suite("SQLite store in a folder it cannot write")
struct SQLiteFolderAccessTests {
    /// Runs `command` to its end (bounded); its exit status and standard error.
    static func run(_ command: String, _ arguments: [String]) throws -> (Subprocess.Termination?, String) {
        let child = try Subprocess(command, arguments, captureStandardError: true)
        var errors = Data()
        var chunk = [UInt8](repeating: 0, count: 4096)
        while case let count = read(child.standardError!, &chunk, chunk.count), count > 0 {
            errors.append(contentsOf: chunk[..<count])
        }
        return (child.wait(timeout: .seconds(60)), String(decoding: errors, as: UTF8.self))
    }

    /// Whether this machine lets the tests bind-mount a folder read-only (root with
    /// CAP_SYS_ADMIN, as in CI's container and here); tried once on a scratch folder.
    static let canBindMountReadOnly: Bool = {
        guard getuid() == 0, FileManager.default.isExecutableFile(atPath: "/usr/bin/mount") else { return false }
        let scratch = TemporaryDirectory("mount-probe")
        let target = scratch.makeDirectory("target")
        guard
            (try? run("/usr/bin/mount", ["--bind", "-o", "ro", scratch.makeDirectory("source").path, target.path]))?.0
                == .exited(0)
        else {
            return false
        }
        _ = try? run("/usr/bin/umount", [target.path])
        return true
    }()

    static func expectNotWritable(
        _ error: PersistenceError?,
        folder: URL,
        code: POSIXErrorCode,
        name: String,
        sourceLocation: SourceLocation = #_sourceLocation
    ) {
        guard let error else {
            Issue.record("no error", sourceLocation: sourceLocation)
            return
        }
        #expect(error.code == .notWritable, "\(error)", sourceLocation: sourceLocation)
        #expect(
            error.url?.path == folder.path,
            "the error names \(String(describing: error.url)), not the folder \(folder.path): \(error)",
            sourceLocation: sourceLocation
        )
        #expect(
            (error.underlying as? POSIXError)?.code == code,
            "underlying: \(String(describing: error.underlying))",
            sourceLocation: sourceLocation
        )
        #expect(
            error.message.contains(name) && error.message.contains(folder.path),
            "\(error)",
            sourceLocation: sourceLocation
        )
    }

    static func openingError(_ url: URL, readOnly: Bool = false) -> PersistenceError? {
        do {
            let store = try SQLiteStore(
                url: url,
                schema: ConformanceSchema.v1,
                options: StoreOptions(isReadOnly: readOnly, presentsFiles: false)
            )
            store.close()
            return nil
        } catch {
            return error as? PersistenceError
        }
    }

    @Test(
        "A read-only file system: a new store and an existing one opened for writing fail with notWritable naming the folder and EROFS; read-only still opens",
        .enabled(if: canBindMountReadOnly, "needs root with CAP_SYS_ADMIN for a read-only bind mount")
    )
    func readOnlyFileSystem() throws {
        let directory = TemporaryDirectory("sqlite-erofs")
        let source = directory.makeDirectory("source")
        let existing = source.appendingPathComponent("existing.sqlite")
        do {
            let store = try SQLiteStore(
                url: existing,
                schema: ConformanceSchema.v1,
                options: StoreOptions(presentsFiles: false)
            )
            try store.commit(
                StoreChanges(
                    inserts: (0..<3).map {
                        Record(
                            id: .deterministic(entity: "Item", name: "\($0)"),
                            values: ["title": .string("item \($0)")]
                        )
                    }
                )
            )
            store.close()
        }
        let folder = directory.makeDirectory("read-only")
        let (mounted, mountErrors) = try Self.run("/usr/bin/mount", ["--bind", "-o", "ro", source.path, folder.path])
        try #require(mounted == .exited(0), "mount: \(mountErrors)")
        defer {
            let (unmounted, errors) = (try? Self.run("/usr/bin/umount", [folder.path])) ?? (nil, "not run")
            #expect(unmounted == .exited(0), "umount \(folder.path): \(errors)")
        }

        let created = Self.openingError(folder.appendingPathComponent("new.sqlite"))
        Self.expectNotWritable(created, folder: folder, code: .EROFS, name: "EROFS")
        #expect(created?.message.contains("read-only") == true, "says what to do: \(String(describing: created))")

        let opened = Self.openingError(folder.appendingPathComponent("existing.sqlite"))
        Self.expectNotWritable(opened, folder: folder, code: .EROFS, name: "EROFS")

        let readOnly = try SQLiteStore(
            url: folder.appendingPathComponent("existing.sqlite"),
            schema: ConformanceSchema.v1,
            options: StoreOptions(isReadOnly: true, presentsFiles: false)
        )
        #expect(try readOnly.count(for: FetchRequest(entity: "Item")) == 3)
        readOnly.close()
    }

    @Test(
        "A folder this user may not write: notWritable naming the folder and EACCES (as root, run as nobody through setpriv)",
        .enabled(if: getuid() != 0 || FileManager.default.isExecutableFile(atPath: "/usr/bin/setpriv"))
    )
    func permissionDenied() throws {
        let directory = TemporaryDirectory("sqlite-eacces")
        let schema = directory("schema.json")
        try JSONEncoder().encode(ConformanceSchema.v1).write(to: schema)
        let folder = directory.makeDirectory("locked")
        try FileManager.default.setAttributes([.posixPermissions: 0o555], ofItemAtPath: folder.path)
        defer { try? FileManager.default.setAttributes([.posixPermissions: 0o755], ofItemAtPath: folder.path) }
        let helper = ChildProcess.helperURL.path
        let arguments = ["store-insert", "sqlite", schema.path, folder.appendingPathComponent("new.sqlite").path, "1"]
        // Root writes anywhere: the helper opens the store as nobody.
        let (ended, errors) =
            getuid() == 0
            ? try Self.run(
                "/usr/bin/setpriv",
                ["--reuid=65534", "--regid=65534", "--clear-groups", helper] + arguments
            )
            : try Self.run(helper, arguments)
        #expect(
            ended == .exited(2),
            "the helper ended with \(ended.map(\.description) ?? "nothing within 60 s"): \(errors)"
        )
        #expect(errors.contains("notWritable"), "\(errors)")
        #expect(errors.contains("EACCES") && errors.contains(folder.path), "names the folder and the errno: \(errors)")
        #expect(!errors.contains("unable to open database file") || errors.contains("EACCES"), "\(errors)")
    }

    @Test("The error for each errno names it and says what to do")
    func errorMapping() {
        let store = URL(fileURLWithPath: "/data/notes/notes.sqlite")
        let folder = store.deletingLastPathComponent()
        let cause = PersistenceError(.ioFailed, "cause")
        let cases: [(POSIXErrorCode, String, String)] = [
            (.EROFS, "EROFS", "read-only file system"), (.EACCES, "EACCES", "permissions"),
            (.EPERM, "EPERM", "permissions"),
            (.ENOSPC, "ENOSPC", "free space"),
        ]
        for (code, name, advice) in cases {
            let error = WriteAccess.error((folder, code), store: store, doing: "opening the store", cause: cause)
            Self.expectNotWritable(error, folder: folder, code: code, name: name)
            #expect(error.message.contains(advice), "\(error)")
            #expect(error.message.contains("the folder"), "\(error)")
        }
        let file = WriteAccess.error(
            (URL(fileURLWithPath: store.path + "-wal"), .EACCES),
            store: store,
            doing: "committing",
            cause: cause
        )
        #expect(file.message.contains("the file \(store.path)-wal"), "\(file)")
    }
}
