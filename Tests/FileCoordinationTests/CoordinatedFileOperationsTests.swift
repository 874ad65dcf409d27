import ConcordSystem
import ConcordTestSupport
import FileCoordination
import Foundation
import Testing

@Suite("Coordinated file operations")
struct CoordinatedFileOperationsTests {
    let directory = TemporaryDirectory("operations")
    let coordinator = FileCoordinator()

    @Test("Atomic replace creates, replaces, keeps permissions and leaves no temporary file")
    func atomicReplace() throws {
        let file = directory("settings.json")
        try coordinator.replaceContentsOfItem(at: file, with: Data("one".utf8))
        try FileManager.default.setAttributes([.posixPermissions: 0o600], ofItemAtPath: file.path)
        try coordinator.replaceContentsOfItem(at: file, with: Data("two".utf8))
        #expect(try coordinator.contentsOfItem(at: file) == Data("two".utf8))
        let permissions = try FileManager.default.attributesOfItem(atPath: file.path)[.posixPermissions] as? Int
        #expect(permissions == 0o600)
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory.url.path) == ["settings.json"])
    }

    @Test("A failed replace leaves the old content and says which file and why")
    func failedReplace() throws {
        let readOnly = directory.makeDirectory("readonly")
        let file = readOnly.appendingPathComponent("data.txt")
        try Data("old".utf8).write(to: file)
        try FileManager.default.setAttributes([.posixPermissions: 0o500], ofItemAtPath: readOnly.path)
        defer { try? FileManager.default.setAttributes([.posixPermissions: 0o700], ofItemAtPath: readOnly.path) }
        guard getuid() != 0 else {
            // root ignores directory permissions; use a missing directory instead.
            let missing = directory("missing", "data.txt")
            #expect {
                try coordinator.replaceContentsOfItem(at: missing, with: Data("x".utf8))
            } throws: { error in
                (error as? SystemCallError)?.path?.contains("missing") == true
            }
            return
        }
        #expect(throws: SystemCallError.self) {
            try coordinator.replaceContentsOfItem(at: file, with: Data("new".utf8))
        }
        #expect(try Data(contentsOf: file) == Data("old".utf8))
    }

    @Test("updateContentsOfItem starts from nothing when the file is missing")
    func updateFromNothing() throws {
        let file = directory("count")
        try coordinator.updateContentsOfItem(at: file) { data in
            #expect(data == nil)
            return Data("1".utf8)
        }
        try coordinator.updateContentsOfItem(at: file) { data in
            Data((String(decoding: data ?? Data(), as: UTF8.self) + "2").utf8)
        }
        #expect(try Data(contentsOf: file) == Data("12".utf8))
    }

    @Test("Moving a database moves its -wal and -shm with it, and drops a stale companion at the destination")
    func moveWithCompanions() throws {
        let source = directory.makeDirectory("old").appendingPathComponent("store.sqlite")
        let destinationFolder = directory.makeDirectory("new")
        let destination = destinationFolder.appendingPathComponent("store.sqlite")
        for (suffix, text) in [("", "db"), ("-wal", "wal")] {
            try Data(text.utf8).write(to: URL(fileURLWithPath: source.path + suffix))
        }
        try Data("stale".utf8).write(to: URL(fileURLWithPath: destination.path + "-shm"))
        try coordinator.moveItem(at: source, to: destination, companionSuffixes: ["-wal", "-shm"])
        #expect(try Data(contentsOf: destination) == Data("db".utf8))
        #expect(try Data(contentsOf: URL(fileURLWithPath: destination.path + "-wal")) == Data("wal".utf8))
        #expect(!FileManager.default.fileExists(atPath: destination.path + "-shm"))
        #expect(try FileManager.default.contentsOfDirectory(atPath: directory("old").path).isEmpty)
    }

    @Test("Moving a missing item fails with an error naming it")
    func moveMissing() {
        #expect {
            try coordinator.moveItem(at: directory("nothing"), to: directory("else"))
        } throws: { error in
            (error as? SystemCallError)?.path == directory("nothing").path
        }
    }

    @Test("Moving into a folder that does not exist fails with an error naming the destination")
    func moveIntoMissingFolder() throws {
        let source = directory("present.txt")
        try Data("x".utf8).write(to: source)
        let destination = directory("missing", "present.txt")
        #expect {
            try coordinator.moveItem(at: source, to: destination)
        } throws: { error in
            let error = error as? SystemCallError
            return error?.path == destination.path && error?.errno == .noSuchFileOrDirectory
                && error?.systemCall == "rename"
        }
        #expect(FileManager.default.fileExists(atPath: source.path))
        // A destination the kernel refuses is named too: a folder over a file.
        let folder = directory.makeDirectory("folder")
        #expect {
            try FileSystem.rename(folder.path, to: source.path)
        } throws: { error in
            (error as? SystemCallError)?.path == source.path
        }
    }

    @Test("Copy copies files and directories; remove removes a whole tree")
    func copyAndRemove() throws {
        let tree = directory.makeDirectory("tree", "sub")
        try Data("leaf".utf8).write(to: tree.appendingPathComponent("leaf.txt"))
        try coordinator.copyItem(at: directory("tree"), to: directory("copy"))
        #expect(try Data(contentsOf: directory("copy", "sub", "leaf.txt")) == Data("leaf".utf8))
        try coordinator.copyItem(at: tree.appendingPathComponent("leaf.txt"), to: directory("leaf-copy.txt"))
        #expect(try Data(contentsOf: directory("leaf-copy.txt")) == Data("leaf".utf8))
        try coordinator.removeItem(at: directory("tree"))
        #expect(!FileManager.default.fileExists(atPath: directory("tree").path))
        try coordinator.removeItem(at: directory("tree"))  // already gone: fine
    }
}
