import ConcordSystem
import ConcordTestSupport
import Foundation
import Testing

/// The system layer's small file-system calls that sync's listings and folders go through.
@Suite("System file-system calls")
struct SystemFileSystemTests {
    @Test("a directory's entries are listed without . and ..; a missing path or a file is an error that names it")
    func directoryEntries() throws {
        let directory = TemporaryDirectory("entries")
        let folder = directory.makeDirectory("folder")
        try Data("a".utf8).write(to: folder.appendingPathComponent("a.log"))
        try Data().write(to: folder.appendingPathComponent(".hidden"))
        directory.makeDirectory("folder", "sub")
        #expect(try FileSystem.directoryEntries(at: folder.path).sorted() == [".hidden", "a.log", "sub"])

        let missing = folder.appendingPathComponent("missing").path
        #expect {
            try FileSystem.directoryEntries(at: missing)
        } throws: { error in
            let error = error as? SystemCallError
            return error?.errno == .noSuchFileOrDirectory && error?.path == missing && error?.systemCall == "opendir"
        }
        let file = folder.appendingPathComponent("a.log").path
        #expect {
            try FileSystem.directoryEntries(at: file)
        } throws: { error in
            (error as? SystemCallError)?.errno == .notDirectory && (error as? SystemCallError)?.path == file
        }
    }

    @Test("folders are made through a symbolic link to a directory; a link leading nowhere is not a directory")
    func createDirectoryThroughLinks() throws {
        let directory = TemporaryDirectory("links")
        let real = directory.makeDirectory("real")
        let link = directory.url.appendingPathComponent("link")
        try FileManager.default.createSymbolicLink(at: link, withDestinationURL: real)
        try FileSystem.createDirectory(at: link.appendingPathComponent("a/b").path)
        #expect(try FileSystem.identity(at: real.appendingPathComponent("a/b").path)?.kind == .directory)
        // The link itself is fine too, and stays a link.
        try FileSystem.createDirectory(at: link.path)
        #expect(try FileSystem.identity(at: link.path)?.kind == .symbolicLink)
        #expect(try FileSystem.identity(at: link.path, followingLinks: true)?.kind == .directory)

        let dangling = directory.url.appendingPathComponent("dangling")
        try FileManager.default.createSymbolicLink(
            at: dangling,
            withDestinationURL: directory.url.appendingPathComponent("nowhere")
        )
        #expect(try FileSystem.identity(at: dangling.path, followingLinks: true) == nil)
        #expect {
            try FileSystem.createDirectory(at: dangling.path)
        } throws: { error in
            (error as? SystemCallError)?.errno == .fileExists && (error as? SystemCallError)?.path == dangling.path
        }
    }
}
