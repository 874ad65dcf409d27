// swift-tools-version: 6.1
// A store plugin for Concord, as a package of its own: copy this folder, rename `FolderStore`,
// and point the dependency below at Concord (a path while you work on both, a URL and a version
// once Concord is tagged).
import PackageDescription

let package = Package(
    name: "FolderStore",
    products: [
        .library(name: "FolderStore", targets: ["FolderStore"]),
        .library(name: "RecipePolicies", targets: ["RecipePolicies"]),
    ],
    dependencies: [
        // Concord, two folders up in its own repository. Elsewhere:
        // .package(path: "/path/to/Concord") or .package(url: "https://…/Concord.git", from: "0.1.0")
        .package(name: "Concord", path: "../..")
    ],
    targets: [
        // The plugin: public API of Persistence and FileCoordination only.
        .target(
            name: "FolderStore",
            dependencies: [
                .product(name: "Persistence", package: "Concord"),
                .product(name: "FileCoordination", package: "Concord"),
            ]
        ),
        // The entity-policy template: validation repair, a singleton, duplicates, a merge
        // policy and origin-aware hooks for a small recipe app (Persistence's API only).
        .target(
            name: "RecipePolicies",
            dependencies: [.product(name: "Persistence", package: "Concord")]
        ),
        // The plugin's tests: Concord's store-plugin contract (StoreConformance), one test case
        // per check.
        .testTarget(
            name: "FolderStoreTests",
            dependencies: [
                "FolderStore",
                .product(name: "Persistence", package: "Concord"),
                .product(name: "StoreConformance", package: "Concord"),
            ]
        ),
        // The policies at work, on a FolderStore.
        .testTarget(
            name: "RecipePoliciesTests",
            dependencies: ["RecipePolicies", "FolderStore", .product(name: "Persistence", package: "Concord")]
        ),
    ],
    swiftLanguageModes: [.v6]
)
